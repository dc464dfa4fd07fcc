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
