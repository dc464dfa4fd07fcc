//! Fuzz target `token_file`: see `fuzz_common::token_file` for what it checks.
#![cfg_attr(not(feature = "afl"), no_main)]

#[path = "../../tests/fuzz_common/mod.rs"]
mod fuzz_common;

#[cfg(not(feature = "afl"))]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_common::token_file(data));

#[cfg(feature = "afl")]
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_common::token_file(data));
}
