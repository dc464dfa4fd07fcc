//! The sections that close `spool --help` and the man page spool(1):
//! written once, shown in both.
//!
//! `--help` prints them after the options as `Title:` and an indented
//! body; `spool man` gives each its own man page section (`EXAMPLES`,
//! `EXIT STATUS`, …), filled as prose or kept as written for tables and
//! examples.

/// How a section's body is set in the man page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Lines kept as written (examples, tables).
    Verbatim,
    /// Prose: the lines of a paragraph are refilled; blank lines separate
    /// paragraphs.
    Prose,
}

/// One closing section: its title, its layout in the man page, and its
/// body (lines without indentation).
#[derive(Clone, Copy, Debug)]
pub struct Section {
    pub title: &'static str,
    pub layout: Layout,
    pub body: &'static str,
}

/// The closing sections, in order.
pub const SECTIONS: &[Section] = &[
    Section {
        title: "Examples",
        layout: Layout::Verbatim,
        body: "\
spool enqueue '{\"event\":\"signup\"}' --key signup-42
some-producer | spool -s /var/spool/app/outbox.db enqueue --lines
spool shape
spool list --min-attempts 3
spool show 17 --raw | jq .
spool list --json | jq -r 'select(.attempts > 5) | .id' | spool done -
spool stats --prometheus > /var/lib/node_exporter/spool.prom
spool verify && spool compact
spool dlq export --format csv -o dead.csv && spool dlq requeue --all
spool -s old.db export | spool -s new.ndjson import -",
    },
    Section {
        title: "Conventions",
        layout: Layout::Prose,
        body: "\
Durations are written 500ms, 5s, 2m, 1h, 1h30m (a bare number is seconds);
sizes 512, 64KiB, 16MiB; counts and ids are whole numbers (20, 1000). Data
goes to stdout, diagnostics to stderr.

Commands that only read (drain, list, show, size, stats, shape, verify without
--repair, dlq list/show/export, export) never create or modify a spool.

With --json, items are objects with id, payload (or payload_base64 when
not UTF-8), key, attempts, enqueued_at, next_retry_at, last_error and
held; reports use snake_case names; streams are NDJSON.",
    },
    Section {
        title: "Exit status",
        layout: Layout::Verbatim,
        body: "\
0    success (also --help, --version, and a reader closing the output)
1    replay dead-lettered at least one item
64   usage error: bad flags or arguments
65   bad data: corrupt spool, malformed input line, unknown id
66   the spool or an input file does not exist
70   internal error (a bug: please report it)
73   cannot create the spool: the path exists (init), its directory is
     missing, or it is on a network file system (see --allow-network-fs)
74   I/O error: disk full, failed write or fsync
75   temporary: the spool is full, locked by another replay or busy past the
     timeout, or replay left items for retry
77   permission denied on the spool, its directory or a file
78   configuration error: serve refuses an unsafe or broken configuration
130  interrupted by SIGINT; 143 by SIGTERM",
    },
    Section {
        title: "Files",
        layout: Layout::Verbatim,
        body: "\
SQLite spool:  <spool>, <spool>-wal, <spool>-shm
NDJSON spool:  <spool> (pending items), <spool>.dead (dead letters),
               <spool>.delivered (delivered items kept by `retain`,
               once compaction moved them there from <spool>),
               <spool>.meta (settings and identity), <spool>.idx (an index
               derived from them), <spool>.idx-dirty (the index's write mark),
               <spool>.idx-journal (while the index is written)
Any spool:     <spool>.replay.lock (replay, watch), <spool>.serve.lock (serve)

Every file spool creates, outputs written with -o and the watch metrics
file included, gets mode 0600, narrowed further by the umask. An existing
file keeps its mode, also when it is replaced atomically. See
docs/formats.md for what each file holds.",
    },
    Section {
        title: "Environment",
        layout: Layout::Verbatim,
        body: "\
SPOOL_PATH             the spool to use when --spool is not given
                       (default ./spool.db)
SSL_CERT_FILE,         the certificates HTTPS clients trust instead of the
SSL_CERT_DIR           system store (replay --url/--push, watch probes)
CREDENTIALS_DIRECTORY  serve: read tokens from spool-serve-tokens in it when
                       --token-file is not given (systemd LoadCredential=)",
    },
];

/// The text after the options of `spool --help`.
pub fn after_long_help() -> String {
    let mut out = String::new();
    for (n, s) in SECTIONS.iter().enumerate() {
        if n > 0 {
            out.push_str("\n\n");
        }
        out.push_str(s.title);
        out.push(':');
        for line in s.body.lines() {
            out.push('\n');
            if !line.is_empty() {
                out.push_str("  ");
                out.push_str(line);
            }
        }
    }
    out
}

/// The sections as roff, each under its own `.SH` heading, to go inside
/// a page that starts with roff's preamble.
pub fn roff() -> String {
    let mut page = roff::Roff::new();
    for s in SECTIONS {
        page.control("SH", [s.title.to_uppercase().as_str()]);
        match s.layout {
            Layout::Verbatim => {
                page.control("nf", []);
                for line in s.body.lines() {
                    page.text([roff::roman(line)]);
                }
                page.control("fi", []);
            }
            Layout::Prose => {
                for (n, para) in s.body.split("\n\n").enumerate() {
                    if n > 0 {
                        page.control("PP", []);
                    }
                    let filled = para.split_whitespace().collect::<Vec<_>>().join(" ");
                    page.text([roff::roman(filled)]);
                }
            }
        }
    }
    // The page's preamble (how apostrophes are set) is already at the
    // top of the page these sections go into.
    let preamble = roff::Roff::new().render();
    page.render()[preamble.len()..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lines_fit_a_terminal_and_sections_are_separated() {
        let text = after_long_help();
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "too long for --help: {line:?}");
        }
        for s in SECTIONS {
            assert!(text.contains(&format!("{}:\n  ", s.title)), "{}", s.title);
        }
    }

    #[test]
    fn every_section_is_a_man_page_section() {
        let roff = roff();
        for s in SECTIONS {
            assert!(
                roff.contains(&format!(".SH {}", s.title.to_uppercase()))
                    || roff.contains(&format!(".SH \"{}\"", s.title.to_uppercase())),
                "{}: {roff}",
                s.title
            );
        }
        assert!(!roff.contains("EXTRA"));
    }

    #[test]
    fn the_exit_status_section_names_every_code() {
        let exit = SECTIONS.iter().find(|s| s.title == "Exit status").unwrap();
        for code in [0u8, 1, 64, 65, 66, 70, 73, 74, 75, 77, 78, 130] {
            assert!(
                exit.body
                    .lines()
                    .any(|l| l.starts_with(&format!("{code} "))),
                "exit {code} is not listed"
            );
        }
        assert!(exit.body.contains("left items for retry"));
    }
}
