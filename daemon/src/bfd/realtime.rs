//! Real-time scheduling for the threads whose timing is the product: BFD. With SCHED_FIFO
//! they preempt every ordinary process, so a saturated node still sends and checks BFD
//! packets on time (DESIGN.md: BFD runs on its own thread so load never delays a packet).

use thread_priority::{
    set_thread_priority_and_policy, thread_native_id, RealtimeThreadSchedulePolicy, ThreadPriority,
    ThreadSchedulePolicy,
};

/// SCHED_FIFO priority: above ordinary threads, below the kernel's own (50 is what
/// threaded IRQ handlers use) so the NIC's interrupts still run first.
const PRIORITY: u8 = 40;

/// Moves the calling thread to SCHED_FIFO. Without CAP_SYS_NICE (or an RLIMIT_RTPRIO) this
/// fails; the thread then runs with normal priority and the caller logs why.
pub fn raise_current_thread() -> Result<(), String> {
    let priority = ThreadPriority::Crossplatform(
        PRIORITY.try_into().map_err(|e| format!("priority {PRIORITY}: {e:?}"))?,
    );
    let policy = ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo);
    set_thread_priority_and_policy(thread_native_id(), priority, policy)
        .map_err(|e| format!("cannot switch to SCHED_FIFO: {e:?}"))
}
