//! The buffer pool's contract, through the public API: a dropped tensor's buffer is taken back
//! by the next tensor of its length, whatever the length, and the pool holds up to
//! [`MAX_POOLED_BYTES`] per thread and element type, that bound included.

use torchlean_engine_cpu::{clear_pool, pooled_bytes, CpuTensor, MAX_POOLED_BYTES};

#[test]
fn a_dropped_buffer_is_taken_back_at_every_length() {
    // both sides of the short lists' end and the long lists
    for len in [0usize, 1, 10, 1023, 1024, 1025, 5000] {
        clear_pool::<f64>();
        let a = CpuTensor::<f64>::zeros([len]).unwrap();
        let p = a.as_slice().as_ptr();
        drop(a);
        assert!(pooled_bytes::<f64>() >= len * 8, "length {len}: not pooled");
        let b = CpuTensor::<f64>::zeros([len]).unwrap();
        assert_eq!(pooled_bytes::<f64>(), 0, "length {len}: still pooled");
        if len > 0 {
            assert_eq!(b.as_slice().as_ptr(), p, "length {len}: a fresh buffer");
        }
    }
    clear_pool::<f64>();
}

#[test]
fn the_pool_holds_exactly_its_bound() {
    clear_pool::<f32>();
    drop(CpuTensor::<f32>::from_vec([1], vec![0.0]).unwrap());
    let overhead = pooled_bytes::<f32>() - 4;
    clear_pool::<f32>();
    let len = (MAX_POOLED_BYTES - overhead) / 4;
    assert_eq!(len * 4 + overhead, MAX_POOLED_BYTES);
    // `vec![0.0; n]` is calloc'ed and `from_vec` does not write it: no page is touched
    drop(CpuTensor::<f32>::from_vec([len], vec![0.0; len]).unwrap());
    assert_eq!(
        pooled_bytes::<f32>(),
        MAX_POOLED_BYTES,
        "a buffer that fills it is kept"
    );
    clear_pool::<f32>();
    drop(CpuTensor::<f32>::from_vec([len + 1], vec![0.0; len + 1]).unwrap());
    assert_eq!(pooled_bytes::<f32>(), 0, "a buffer over the bound is freed");
}
