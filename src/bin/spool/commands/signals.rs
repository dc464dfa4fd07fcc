//! SIGINT and SIGTERM, handled one way by every command that runs until
//! it is stopped or done (`replay`, `replay --follow`, `watch`, `serve`).

use crate::exit::{self, CliError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Told a signal's name (`SIGINT`, `SIGTERM`).
pub type OnSignal = Box<dyn Fn(&str) + Send>;

/// Which signals came.
#[derive(Clone, Default)]
pub struct Signals {
    int: Arc<AtomicBool>,
    term: Arc<AtomicBool>,
}

impl Signals {
    /// Handle SIGINT and SIGTERM on a thread of their own, remembering
    /// which came ([`Signals::exit_code`]).
    ///
    /// The first calls `stop` with the signal's name. With `again`, one
    /// that comes more than a second after the first calls `again` with
    /// its name and exits at once with 130/143; closer repeats (`timeout`
    /// signals both the child and its group) count as the same request.
    /// Without `again`, every signal calls `stop`.
    pub fn handle(
        stop: impl Fn(&str) + Send + 'static,
        again: Option<OnSignal>,
    ) -> Result<Signals, CliError> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
            .map_err(|e| CliError::new(exit::SOFTWARE, format!("cannot handle signals: {e}")))?;
        let came = Signals::default();
        let seen = came.clone();
        std::thread::Builder::new()
            .name("spool-signals".into())
            .spawn(move || {
                let mut first: Option<Instant> = None;
                for sig in signals.forever() {
                    let (name, flag) = if sig == SIGINT {
                        ("SIGINT", &seen.int)
                    } else {
                        ("SIGTERM", &seen.term)
                    };
                    flag.store(true, Ordering::SeqCst);
                    match (first, &again) {
                        (None, _) | (Some(_), None) => {
                            first.get_or_insert_with(Instant::now);
                            stop(name);
                        }
                        (Some(t), Some(_)) if t.elapsed() < Duration::from_secs(1) => {}
                        (Some(_), Some(again)) => {
                            again(name);
                            std::process::exit(i32::from(if sig == SIGINT {
                                exit::INTERRUPTED
                            } else {
                                exit::TERMINATED
                            }));
                        }
                    }
                }
            })
            .map_err(|e| CliError::new(exit::SOFTWARE, format!("cannot handle signals: {e}")))?;
        Ok(came)
    }

    /// 130 after SIGINT, 143 after SIGTERM.
    pub fn exit_code(&self) -> Option<u8> {
        if self.int.load(Ordering::SeqCst) {
            Some(exit::INTERRUPTED)
        } else if self.term.load(Ordering::SeqCst) {
            Some(exit::TERMINATED)
        } else {
            None
        }
    }
}
