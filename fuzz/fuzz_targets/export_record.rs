//! Fuzz target `export_record`: see `fuzz_common::export_record` for what it checks.
#![cfg_attr(not(feature = "afl"), no_main)]

#[path = "../../tests/fuzz_common/mod.rs"]
mod fuzz_common;

#[cfg(not(feature = "afl"))]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_common::export_record(data));

#[cfg(feature = "afl")]
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_common::export_record(data));
}
