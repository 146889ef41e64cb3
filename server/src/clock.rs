//! The one source of "now" for reconcilers, so tests can move time instead of sleeping.

use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};

#[derive(Clone)]
pub enum Clock {
    System,
    Manual(Arc<Mutex<Timestamp>>),
}

impl Clock {
    pub fn manual(start: Timestamp) -> Self {
        Self::Manual(Arc::new(Mutex::new(start)))
    }

    pub fn now(&self) -> Timestamp {
        match self {
            Self::System => Timestamp::now(),
            Self::Manual(t) => *t.lock().expect("clock lock"),
        }
    }

    /// Moves a manual clock forward; a no-op on the system clock.
    pub fn advance(&self, by: SignedDuration) {
        if let Self::Manual(t) = self {
            let mut t = t.lock().expect("clock lock");
            *t = t.checked_add(by).expect("in range");
        }
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::System => f.write_str("Clock::System"),
            Self::Manual(t) => write!(f, "Clock::Manual({})", t.lock().expect("clock lock")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manual clock prints the time it stands at: the structs that derive Debug around it show it in a
    /// failing test's message.
    #[test]
    fn debug_text_names_the_clock_and_a_manual_clocks_time() {
        let at: Timestamp = "2026-03-04T05:06:07Z".parse().unwrap();
        assert_eq!(
            format!("{:?}", Clock::manual(at)),
            "Clock::Manual(2026-03-04T05:06:07Z)"
        );
        assert_eq!(format!("{:?}", Clock::System), "Clock::System");
    }
}
