//! Arbitrary bytes as an UPDATE body, under the session contexts the first byte selects.
//! Besides "never panics", whatever the decoder accepts must survive re-encoding by the packer
//! and decoding again without a session reset and with the same prefixes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uplink::bgp::wire::attr_codec::EncodeContext;
use uplink::bgp::wire::attributes::{Afi, Family, PathAttributes};
use uplink::bgp::wire::header::HEADER_LEN;
use uplink::bgp::wire::nlri::afi_of;
use uplink::bgp::wire::packer::{pack_announcements, pack_withdrawals};
use uplink::bgp::wire::update::{decode_update, UpdateContext};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else { return };
    let families = if selector & 4 != 0 {
        vec![Family::IPV4_UNICAST]
    } else {
        vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    };
    let ctx = UpdateContext { four_octet_as: selector & 1 != 0, ebgp: selector & 2 != 0, families };
    let Ok(decoded) = decode_update(body, &ctx) else { return };

    let reread = |msgs: &[Vec<u8>]| {
        msgs.iter()
            .map(|m| {
                assert!(m.len() <= 4096);
                decode_update(&m[HEADER_LEN..], &ctx).expect("a packed UPDATE must decode")
            })
            .collect::<Vec<_>>()
    };

    if let Some(attrs) = &decoded.attributes {
        let enc = EncodeContext { four_octet_as: ctx.four_octet_as };
        let mut msgs = Vec::new();
        if pack_announcements(attrs, Family::IPV4_UNICAST, &decoded.announced, &enc, &mut msgs)
            .is_ok()
        {
            let again: Vec<_> = reread(&msgs).into_iter().flat_map(|d| d.announced).collect();
            assert_eq!(again, decoded.announced);
        }
    }

    if let (Some(attrs), Some(next_hop)) = (&decoded.attributes, decoded.mp_next_hop) {
        let v6: Vec<_> =
            decoded.mp_announced.iter().copied().filter(|p| afi_of(p) == Afi::Ipv6).collect();
        let attrs = PathAttributes { next_hop, ..attrs.clone() };
        let enc = EncodeContext { four_octet_as: ctx.four_octet_as };
        let mut msgs = Vec::new();
        if pack_announcements(&attrs, Family::IPV6_UNICAST, &v6, &enc, &mut msgs).is_ok() {
            let again: Vec<_> = reread(&msgs).into_iter().flat_map(|d| d.mp_announced).collect();
            assert_eq!(again, v6);
        }
    }

    for family in [Family::IPV4_UNICAST, Family::IPV6_UNICAST] {
        let prefixes: Vec<_> =
            decoded.withdrawn.iter().copied().filter(|p| afi_of(p) == family.afi).collect();
        let mut msgs = Vec::new();
        if pack_withdrawals(family, &prefixes, &mut msgs).is_ok() {
            let again: Vec<_> = reread(&msgs).into_iter().flat_map(|d| d.withdrawn).collect();
            assert_eq!(again, prefixes);
        }
    }
});
