//! The operations behind the `spool` command line, one module per
//! operation.
//!
//! The command-line tool is a thin shell: each subcommand turns its
//! arguments into one of the option structs here, calls one function and
//! renders the report it gets back. Everything a subcommand *does* —
//! reading and validating input, hashing keys, filtering, waiting for
//! space, gathering statistics, turning items into JSON — lives here, so
//! that a program embedding the library can do exactly what a script can
//! do with the binary.
//!
//! Nothing in this module prints, exits or reads the environment. Input
//! comes in as readers and byte strings, time comes from the injected
//! [`crate::Clock`], and every failure is a typed [`crate::Error`].

pub mod attempts;
pub mod browse;
pub mod checkpoint;
pub mod clients;
pub mod compact;
pub mod config;
pub mod dlq;
pub mod done;
pub mod drain;
pub mod enqueue;
pub mod export;
pub mod hold;
pub mod ids;
pub mod import;
pub mod init;
pub mod input;
pub mod json;
pub mod list;
pub mod output;
pub mod preview;
pub mod release;
pub mod replay;
pub mod shape;
pub mod show;
pub mod size;
pub mod stats;
pub mod top;
pub mod verify;
pub mod watch;

use crate::error::Error;
use crate::item::ItemId;

/// The error for an id that names no pending item.
pub(crate) fn no_pending_item(id: ItemId) -> Error {
    Error::InvalidInput(format!("no pending item with id {id}"))
}

/// Check that a backend answered one result per id.
pub(crate) fn check_len<T>(what: &str, got: &[T], want: usize) -> crate::Result<()> {
    if got.len() == want {
        Ok(())
    } else {
        Err(Error::Internal(format!(
            "{what} returned {} results for {want} ids",
            got.len()
        )))
    }
}
