#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| torchlean_fuzz_targets::case_json(data));
