//! Deliveries seen recently: one seen before (a retry, or the same update after a reconnect)
//! is not processed again. Ids are kept `ttl` (at least 10 minutes) and at most `capacity` of
//! them.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Seen {
    ttl: Duration,
    capacity: usize,
    ids: HashSet<String>,
    order: VecDeque<(Instant, String)>,
}

impl Seen {
    pub fn new(ttl: Duration, capacity: usize) -> Seen {
        Seen { ttl, capacity: capacity.max(1), ids: HashSet::new(), order: VecDeque::new() }
    }

    /// Whether `id` is new at `now` (and remembers it).
    pub fn first(&mut self, id: &str, now: Instant) -> bool {
        while let Some((at, old)) = self.order.front() {
            if now.duration_since(*at) < self.ttl && self.order.len() < self.capacity {
                break;
            }
            self.ids.remove(old);
            self.order.pop_front();
        }
        if self.ids.contains(id) {
            return false;
        }
        self.ids.insert(id.to_string());
        self.order.push_back((now, id.to_string()));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_is_taken_once_until_it_is_forgotten() {
        let start = Instant::now();
        let mut seen = Seen::new(Duration::from_secs(600), 2);
        assert!(seen.first("a", start));
        assert!(!seen.first("a", start), "a repeat is dropped");
        assert!(seen.first("b", start));
        assert!(seen.first("c", start), "past capacity the oldest is forgotten");
        assert!(seen.first("a", start));
        assert!(seen.first("d", start + Duration::from_secs(601)), "past its time too");
        assert!(seen.first("b", start + Duration::from_secs(601)));
    }
}
