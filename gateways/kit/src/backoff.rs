//! Waits between attempts to reach a channel's service: one second, doubled each failure up
//! to a ceiling, back to one second once a connection was taken.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    first: Duration,
    most: Duration,
}

impl Backoff {
    /// Starting at `first`, at most `most`.
    pub fn new(first: Duration, most: Duration) -> Backoff {
        Backoff { next: first, first, most }
    }

    /// How long to wait before the next attempt (and doubles the one after).
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.most);
        wait
    }

    /// A connection was taken: the next failure waits the first wait again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(30))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_to_the_ceiling_and_start_over_after_a_connection() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let waits: Vec<u64> = (0..5).map(|_| backoff.next_wait().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 5, 5]);
        backoff.reset();
        assert_eq!(backoff.next_wait(), Duration::from_secs(1));
    }
}
