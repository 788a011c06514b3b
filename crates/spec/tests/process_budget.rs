//! `Budget::set_process_default` in a process of its own (the default is set once per process,
//! so this cannot share a test binary with anything that reads it).

use torchlean_spec::Budget;

#[test]
fn only_the_first_setting_of_the_process_default_takes_effect_and_says_so() {
    assert!(Budget::set_process_default(Budget { max_bytes: 1 << 20 }));
    assert!(!Budget::set_process_default(Budget { max_bytes: 2 << 20 }));
    assert_eq!(Budget::process_default().max_bytes, 1 << 20);
}
