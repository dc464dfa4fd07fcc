//! Fuzz target `push_request`: see `fuzz_common::push_request` for what it checks.
#![cfg_attr(not(feature = "afl"), no_main)]

#[path = "../../tests/fuzz_common/mod.rs"]
mod fuzz_common;

#[cfg(not(feature = "afl"))]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_common::push_request(data));

#[cfg(feature = "afl")]
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_common::push_request(data));
}
