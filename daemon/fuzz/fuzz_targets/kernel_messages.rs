//! Arbitrary bytes as a datagram from the kernel (a notification or a dump answer, as the FIB
//! monitor and writer read them). Besides "never panics": every route the parser accepts
//! re-encodes, as the writer would request it, to a message that parses back to the same
//! table, prefix and metric (and next-hop object).

#![no_main]

use libfuzzer_sys::fuzz_target;
use uplink::fib::msg::{self, Hop, RouteKey, RouteTarget};

fuzz_target!(|data: &[u8]| {
    for m in msg::messages(data) {
        let _ = msg::parse_ack(&m);
        let _ = msg::parse_link(m.payload);
        let _ = msg::parse_nexthop(m.payload);
        let Some(route) = msg::parse_route(m.payload) else { continue };
        let key = RouteKey { table: route.table, prefix: route.prefix, metric: route.metric };
        let hops: Vec<Hop> = route
            .hops
            .iter()
            .filter_map(|(gateway, ifindex)| Some(Hop { gateway: (*gateway)?, ifindex: *ifindex }))
            .collect();
        let target = match route.nh_id {
            Some(id) => RouteTarget::Object(id),
            None => RouteTarget::Inline(&hops),
        };
        let mut request = Vec::new();
        msg::new_route(&mut request, 1, &key, target);
        let again = msg::messages(&request).next().expect("one message");
        let back = msg::parse_route(again.payload).expect("our own request parses");
        assert_eq!(back.table, route.table);
        assert_eq!(back.prefix.trunc(), route.prefix.trunc());
        assert_eq!(back.prefix.prefix_len(), route.prefix.prefix_len());
        assert_eq!(back.metric, route.metric);
        assert_eq!(back.nh_id, route.nh_id);
    }
});
