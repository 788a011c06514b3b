#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| torchlean_fuzz_targets::lowering(data));
