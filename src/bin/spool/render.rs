//! Output for people and programs.
//!
//! [`Out`] is stdout, buffered. Every write goes through it so that a
//! reader closing the pipe (`spool drain | head -1`) turns into
//! [`CliError::ClosedPipe`] — a quiet exit 0 — and any other write error
//! into exit 74, never a panic. Tables use comfy-table when stdout is a
//! terminal; otherwise commands print plain tab-separated lines.

use crate::exit::{self, CliError};
use serde::Serialize;
use std::io::{self, BufWriter, IsTerminal, Stdout, Write};
use std::time::Duration;

/// Buffered stdout with error mapping.
pub struct Out {
    inner: BufWriter<Stdout>,
    terminal: bool,
    /// What the output is about (the spool path), for error messages.
    subject: String,
}

impl Out {
    /// Stdout; `subject` (the spool path) names it in errors.
    pub fn stdout(subject: String) -> Out {
        let stdout = io::stdout();
        let terminal = stdout.is_terminal();
        Out {
            inner: BufWriter::with_capacity(64 * 1024, stdout),
            terminal,
            subject,
        }
    }

    /// True when stdout is a terminal (a person is reading).
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// Write bytes exactly.
    pub fn bytes(&mut self, b: &[u8]) -> Result<(), CliError> {
        let subject = &self.subject;
        self.inner.write_all(b).map_err(|e| write_error(e, subject))
    }

    /// Write a line (a newline is added).
    pub fn line(&mut self, s: &str) -> Result<(), CliError> {
        self.bytes(s.as_bytes())?;
        self.bytes(b"\n")
    }

    /// Write a value as one line of JSON.
    pub fn json<T: Serialize>(&mut self, v: &T) -> Result<(), CliError> {
        let s = serde_json::to_string(v).map_err(|e| {
            CliError::new(exit::SOFTWARE, format!("internal error: encode JSON: {e}"))
        })?;
        self.line(&s)
    }

    /// Flush everything written so far.
    pub fn flush(&mut self) -> Result<(), CliError> {
        let subject = &self.subject;
        self.inner.flush().map_err(|e| write_error(e, subject))
    }
}

/// Library operations that write a stream (exports) take stdout as a
/// plain writer; their write errors come back as library errors, which
/// [`super::commands::Ctx::fail_output`] maps like [`write_error`].
impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn write_error(e: io::Error, subject: &str) -> CliError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        CliError::ClosedPipe
    } else {
        CliError::new(
            exit::IO,
            format!("write the output for {subject} to stdout: {e}"),
        )
        .hint("check the file or disk that stdout goes to")
    }
}

/// A table for a terminal: the given header, condensed UTF-8 borders,
/// fitted to the terminal width.
pub fn table(header: &[&str]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    // A terminal that reports no usable size (a pseudo-terminal without
    // a window size reports 0 columns) would squash every column to one
    // character; assume a common width instead.
    match t.width() {
        Some(w) if w >= 40 => {}
        _ => {
            t.set_width(120);
        }
    }
    t
}

/// An age for people, in whole seconds: `0s`, `42s`, `3m20s`.
pub fn age(d: Duration) -> String {
    if d.as_secs() == 0 {
        "0s".into()
    } else {
        duration(Duration::from_secs(d.as_secs()))
    }
}

/// A duration for people: `850ms`, `3m20s`, `2h5m`.
pub fn duration(d: Duration) -> String {
    spool::units::format_duration(d)
}

/// When replay will try an item, for people: `due`, `held`, `behind #7`,
/// `in 5m`, `leased, 4m left`, `3h ago` (delivered or dead-lettered).
pub fn retry(r: &spool::ops::list::RetryState) -> String {
    use spool::ops::list::RetryState;
    match *r {
        RetryState::Due => "due".into(),
        RetryState::Held => "held".into(),
        RetryState::Behind(head) => format!("behind #{head}"),
        RetryState::At(_, d) => format!("in {}", duration(d)),
        RetryState::Leased(_, d) => format!("leased, {} left", duration(d)),
        RetryState::Delivered(d) | RetryState::Dead(d) => format!("{} ago", age(d)),
    }
}

/// A byte count for people: `512 B`, `1.5 KiB`, `16.0 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", UNITS[i])
}

/// `Some(x)` as text, `None` as `-`.
pub fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}
