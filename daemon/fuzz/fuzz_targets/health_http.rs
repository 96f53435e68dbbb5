//! Arbitrary bytes as what an endpoint answers an `http`/`https` health check: the first byte
//! picks how the answer is cut into reads (as TCP may deliver it), the rest is the answer,
//! fed to `health::StatusLineReader` as the probe does.
//!
//! Besides "never panics": the status does not depend on how the bytes arrived (the same
//! answer in one read gives the same status), and a status is only found in a status line of
//! RFC 9112 §4, `HTTP/<version> <3 digits>`, whose code it is.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uplink::announce::health::StatusLineReader;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, answer)) = data.split_first() else { return };
    // Read sizes from a small generator seeded by the first byte: 1 to 64 bytes each.
    let mut state = u32::from(cut) | 1;
    let mut reader = StatusLineReader::default();
    let mut rest = answer;
    while !rest.is_empty() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let size = (state >> 16) as usize % 64 + 1;
        // The probe reads at most `room()` bytes at a time.
        let size = size.min(reader.room()).min(rest.len());
        let (chunk, next) = rest.split_at(size);
        rest = next;
        if reader.push(chunk) {
            break;
        }
    }
    let status = reader.status();

    let mut whole = StatusLineReader::default();
    whole.push(answer);
    assert_eq!(whole.status(), status, "the status depends on how the answer arrived");

    if let Some(code) = status {
        let read = &answer[..answer.len().min(StatusLineReader::LIMIT)];
        let line = read.split(|&b| b == b'\n').next().unwrap_or_default();
        let mut words = line.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty());
        assert!(
            words.next().is_some_and(|v| v.starts_with(b"HTTP/")),
            "{:?}",
            String::from_utf8_lossy(line)
        );
        assert_eq!(
            words.next(),
            Some(format!("{code:03}").as_bytes()),
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
});
