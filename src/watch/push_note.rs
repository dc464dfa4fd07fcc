//! [`PushNote`]: what a push round did besides settling items, owned
//! for the watch daemon's log.

use crate::replay::push::PushEvent;
use crate::watch::log::Level;
use std::fmt;

/// A push round's event besides items ([`PushEvent`]), owned: its one
/// wording (`PushEvent`'s `Display`) and how much it matters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushNote {
    /// An over-ack warns, a smaller batch informs, the rest is detail.
    pub level: Level,
    /// What the log says.
    pub text: String,
}

impl PushNote {
    /// The note for `e`.
    pub fn of(e: &PushEvent<'_>) -> PushNote {
        let level = match e {
            PushEvent::OverAck { .. } => Level::Warn,
            PushEvent::Halved { .. } => Level::Info,
            _ => Level::Detail,
        };
        PushNote {
            level,
            text: e.to_string(),
        }
    }
}

impl fmt::Display for PushNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_carries_the_events_words_and_its_level() {
        let over = PushEvent::OverAck {
            claimed: 9,
            highest: 2,
        };
        let note = PushNote::of(&over);
        assert_eq!(note.level, Level::Warn);
        assert_eq!(note.to_string(), over.to_string());
        assert!(note.text.contains("up to sequence 9") && note.text.contains("only up to 2"));
        let halved = PushNote::of(&PushEvent::Halved {
            max_entries: 4,
            max_bytes: 100,
        });
        assert_eq!(halved.level, Level::Info);
        assert!(halved.text.contains("at most 4 entries and 100 bytes"));
        let failed = PushNote::of(&PushEvent::RequestFailed {
            reason: "push receiver answered HTTP 503",
            failures: 2,
            max: 5,
            retry_in: None,
        });
        assert_eq!(failed.level, Level::Detail);
        assert_eq!(
            failed.text,
            "push receiver answered HTTP 503 (failed request 2 of 5); no more requests in this run"
        );
    }
}
