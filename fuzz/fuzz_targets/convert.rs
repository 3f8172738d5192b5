#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| captf_webhook::fuzzing::convert_body(data));
