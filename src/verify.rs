//! Spool health checks: what is wrong, where, and whether `--repair` can
//! fix it.
//!
//! A check never changes anything. The only repair spool ever makes on
//! its own is cutting a torn tail (an append interrupted by a crash);
//! every other finding is reported for an operator to act on, because
//! "fixing" corruption by dropping lines would drop committed records.

use std::path::PathBuf;

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; the spool is healthy.
    Info,
    /// Unusual but consistent; the spool works.
    Warning,
    /// The spool is damaged.
    Damage,
}

/// One thing a check found.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// The file it concerns.
    pub file: PathBuf,
    /// 1-based line number (NDJSON files).
    pub line: Option<u64>,
    /// What was found and what to do.
    pub message: String,
    /// True when `verify --repair` fixes it (torn tails only).
    pub repairable: bool,
}

/// The result of a check.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct VerifyReport {
    /// Pending items found (when the spool could be read).
    pub pending: Option<u64>,
    /// Dead letters found (when they could be read).
    pub dead_letters: Option<u64>,
    /// Everything found, in file order.
    pub findings: Vec<Finding>,
}

impl VerifyReport {
    /// True when nothing is damaged.
    pub fn healthy(&self) -> bool {
        !self.findings.iter().any(|f| f.severity == Severity::Damage)
    }

    /// True when every damage finding is repairable.
    pub fn repairable(&self) -> bool {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Damage)
            .all(|f| f.repairable)
    }

    pub(crate) fn push(
        &mut self,
        severity: Severity,
        file: &std::path::Path,
        line: Option<u64>,
        message: impl Into<String>,
    ) {
        self.findings.push(Finding {
            severity,
            file: file.to_path_buf(),
            line,
            message: message.into(),
            repairable: false,
        });
    }

    /// Damage that `verify --repair` (or the next write) repairs.
    pub(crate) fn push_repairable(
        &mut self,
        file: &std::path::Path,
        line: Option<u64>,
        message: impl Into<String>,
    ) {
        self.push(Severity::Damage, file, line, message);
        if let Some(f) = self.findings.last_mut() {
            f.repairable = true;
        }
    }
}
