#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| captf_controller::fuzzing::explain_file(data));
