//! Fuzz target `ndjson_line`: see `fuzz_common::ndjson_line` for what it checks.
#![cfg_attr(not(feature = "afl"), no_main)]

#[path = "../../tests/fuzz_common/mod.rs"]
mod fuzz_common;

#[cfg(not(feature = "afl"))]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_common::ndjson_line(data));

#[cfg(feature = "afl")]
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_common::ndjson_line(data));
}
