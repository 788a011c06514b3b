//! Run under `mpirun -np N`: checks every collective of [`World`] against what one process
//! computes from every rank's inputs, and prints one line per rank, `rank R of N: ok HASH`,
//! where HASH is the all-reduced vector's; the test that launches it compares the lines.
//! A failed check panics, and MPI ends the job non-zero.

use torchlean_distributed::{fold_in_rank_order, hash_bits, share, Start, World};

/// Rank `rank`'s vector: values of many magnitudes and both signs, so that a different
/// summation order would round differently.
fn input(rank: usize, len: usize) -> Vec<f64> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ (rank as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let unit = (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
            unit * 10f64.powi((s % 17) as i32 - 8)
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let world = World::start(Start::Required)?;
    let (n, me) = (world.size(), world.rank());
    let len: usize = std::env::args().nth(1).map_or(Ok(1003), |a| a.parse())?;

    // all-reduce: the fold in rank order of every rank's input, chunk by chunk
    let mut v = input(me, len);
    world.all_reduce_sum("the test vector", &mut v)?;
    let mut want = Vec::with_capacity(len);
    for k in 0..n {
        let c = share(len, n, k);
        let pieces: Vec<f64> = (0..n)
            .flat_map(|r| input(r, len)[c.clone()].to_vec())
            .collect();
        want.extend(fold_in_rank_order(&pieces, n));
    }
    let same = v.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(
        same,
        "rank {me}: the all-reduce is not the fold in rank order"
    );

    // the same in f32: an f32 engine's gradients travel as f32
    let mut v32: Vec<f32> = input(me, len).iter().map(|&x| x as f32).collect();
    world.all_reduce_sum("the f32 test vector", &mut v32)?;
    let mut want32 = Vec::with_capacity(len);
    for k in 0..n {
        let c = share(len, n, k);
        let pieces: Vec<f32> = (0..n)
            .flat_map(|r| {
                input(r, len)[c.clone()]
                    .iter()
                    .map(|&x| x as f32)
                    .collect::<Vec<_>>()
            })
            .collect();
        want32.extend(fold_in_rank_order(&pieces, n));
    }
    let same = v32
        .iter()
        .zip(&want32)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(
        same,
        "rank {me}: the f32 all-reduce is not the fold in rank order"
    );

    // in buckets, sent while "working" (made ready out of order, the last one never): each
    // element the same bits as the all-reduce's
    let lens = [len / 3, 0, 1, len - len / 3 - 1.min(len), 2];
    let whole = |r: usize| -> Vec<f64> { input(r, lens.iter().sum()) };
    let mut blocking = whole(me);
    world.all_reduce_sum("the bucketed vector, whole", &mut blocking)?;
    let mine = whole(me);
    let ((), sums) = world.sum_in_buckets("the bucketed vector", &lens, |buckets| {
        let mut at = 0;
        let starts: Vec<usize> = lens
            .iter()
            .map(|&l| {
                at += l;
                at - l
            })
            .collect();
        for b in [2, 1, 0, 3] {
            let values = buckets.values_mut(b).expect("not sent yet");
            values.copy_from_slice(&mine[starts[b]..starts[b] + lens[b]]);
            buckets.ready(b);
            buckets.progress();
        }
        for b in 0..4 {
            assert!(buckets.values_mut(b).is_none(), "bucket {b} was sent");
        }
        let last = buckets.values_mut(4).expect("bucket 4 is not ready");
        last.copy_from_slice(&mine[starts[4]..]);
    })?;
    let bucketed: Vec<f64> = sums.concat();
    let same = bucketed.len() == blocking.len()
        && bucketed
            .iter()
            .zip(&blocking)
            .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "rank {me}: the bucketed sum is not the all-reduce's");

    // every rank has the same bits
    let hash = hash_bits(v.iter().copied());
    let hashes = world.all_gather(&[hash])?;
    assert!(hashes.iter().all(|h| h == &[hash]), "rank {me}: {hashes:?}");

    // gathering vectors of different lengths
    let mine: Vec<u64> = (0..me as u64 + 1).map(|i| 100 * me as u64 + i).collect();
    let all = world.all_gather(&mine)?;
    for (r, got) in all.iter().enumerate() {
        let want: Vec<u64> = (0..r as u64 + 1).map(|i| 100 * r as u64 + i).collect();
        assert_eq!(got, &want, "rank {me}: gathered from rank {r}");
    }

    // bytes of every length
    let text = "x".repeat(3 * me + 1);
    let texts = world.all_gather_bytes(text.as_bytes())?;
    for (r, got) in texts.iter().enumerate() {
        assert_eq!(
            got,
            "x".repeat(3 * r + 1).as_bytes(),
            "rank {me}: bytes of rank {r}"
        );
    }

    // broadcast from rank 0, and `any`
    let mut b = input(me, 5);
    world.broadcast("the broadcast vector", &mut b)?;
    assert_eq!(b, input(0, 5), "rank {me}: broadcast");
    assert!(world.any(me == n - 1)? && !world.any(false)?);

    // a length that differs between ranks is refused on every rank, nothing hangs
    let mut odd = vec![1.0; 3 + me];
    let refused = world.all_reduce_sum("a vector of each rank's own length", &mut odd);
    assert!(
        n == 1 || refused.is_err(),
        "rank {me}: a mismatch was not refused"
    );
    if let Err(e) = refused {
        if me == 0 {
            eprintln!("refused as expected: {e}");
        }
    }
    world.barrier();
    println!("rank {me} of {n}: ok {hash:016x}");
    Ok(())
}
