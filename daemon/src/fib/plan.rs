//! A plan: the kernel requests the planner decided on, in the order the kernel must see them —
//! nexthop objects and groups first (so a group replaced because a next hop was lost is right
//! before any route moves), then routes, then the objects nothing uses any more.

use super::msg::{Hop, RouteKey};
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectOp {
    /// Create or replace a nexthop object: one gateway on one interface.
    Nexthop { id: u32, hop: Hop },
    /// Create or replace a group; the kernel swaps the members under every route using it.
    Group { id: u32, members: Vec<u32> },
    /// Delete a nexthop object or group (the kernel removes the routes that use it).
    Delete(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteAction {
    /// Point the route at this group (with nexthop objects: `RTA_NH_ID`; without: its
    /// members inline, from [`Plan::inline`]).
    Set(u32),
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteOp {
    pub key: RouteKey,
    pub instance: u32,
    pub action: RouteAction,
}

#[derive(Debug, Default)]
pub struct Plan {
    pub objects: Vec<ObjectOp>,
    pub routes: Vec<RouteOp>,
    pub cleanup: Vec<ObjectOp>,
    /// Without nexthop objects: the hops of each group a route is set to, as planned.
    pub inline: HashMap<u32, Vec<Hop>>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.routes.is_empty() && self.cleanup.is_empty()
    }

    pub fn len(&self) -> usize {
        self.objects.len() + self.routes.len() + self.cleanup.len()
    }
}

/// Where a request of a plan sits, in the order [`Plan::requests`] sends them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    Object(&'a ObjectOp),
    Route(&'a RouteOp),
}

impl Plan {
    /// Request `index` in sending order.
    pub fn request(&self, index: usize) -> Option<Request<'_>> {
        let Some(rest) = index.checked_sub(self.objects.len()) else {
            return self.objects.get(index).map(Request::Object);
        };
        match rest.checked_sub(self.routes.len()) {
            None => self.routes.get(rest).map(Request::Route),
            Some(last) => self.cleanup.get(last).map(Request::Object),
        }
    }

    /// Every request in sending order.
    pub fn requests(&self) -> impl Iterator<Item = Request<'_>> {
        self.objects
            .iter()
            .map(Request::Object)
            .chain(self.routes.iter().map(Request::Route))
            .chain(self.cleanup.iter().map(Request::Object))
    }
}
