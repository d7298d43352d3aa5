//! The KV pool and its slot allocator: allocation order, release and reuse, exhaustion as an
//! error, and writes through the fused op that keep the pool (or leave it as it was).

use crate::common::{Case, devices, host};
use burn::tensor::{DType, Tensor};
use burn_rope_pool::RopePoolConfig;
use burn_rope_pool::pool::{KvPool, KvPoolError, SeqToken};

/// `n` new tokens of `seq`, continuing from `from`.
fn tokens(seq: u64, from: usize, n: usize) -> Vec<SeqToken> {
    (from..from + n)
        .map(|position| SeqToken { seq, position })
        .collect()
}

#[test]
fn planner_hands_out_reuses_and_refuses() {
    let device = burn::tensor::Device::flex();
    let config = RopePoolConfig::new(8, 2, 2);
    let mut pool = KvPool::try_new(config, 6, &device, DType::F32).unwrap();
    let slots = |pool: &mut KvPool, tokens: &[SeqToken]| {
        let step = pool.plan_step(tokens)?;
        let (_, slots) = burn_rope_pool::testing::step_slots(&step);
        Ok::<_, KvPoolError>(slots)
    };
    // Interleaved sequences: each sequence's rows are taken together (sequences in order of
    // first appearance), in position order; the slots come back in batch order.
    let batch = [
        tokens(1, 0, 1),
        tokens(2, 0, 1),
        tokens(1, 1, 2),
        tokens(2, 1, 1),
    ]
    .concat();
    assert_eq!(slots(&mut pool, &batch).unwrap(), vec![0, 3, 1, 2, 4]);
    assert_eq!(pool.rows(1), Some(&[0, 1, 2][..]));
    assert_eq!(pool.rows(2), Some(&[3, 4][..]));
    assert_eq!(
        slots(&mut pool, &tokens(3, 0, 2)),
        Err(KvPoolError::Exhausted {
            requested: 2,
            available: 1
        })
    );
    assert_eq!(pool.available(), 1, "a refused batch allocates nothing");
    assert_eq!(pool.release(1), Ok(3));
    assert_eq!(pool.available(), 4);
    assert_eq!(
        slots(&mut pool, &tokens(3, 0, 2)).unwrap(),
        vec![0, 1],
        "freed rows are reused, lowest first"
    );
    // A cancelled step gives its rows back; its sequence continues where it was.
    let step = pool.plan_step(&tokens(2, 2, 2)).unwrap();
    assert_eq!(pool.available(), 0);
    pool.cancel_step(step);
    assert_eq!(pool.available(), 2);
    assert_eq!(pool.rows(2), Some(&[3, 4][..]));
    assert_eq!(
        pool.release(9),
        Err(KvPoolError::UnknownSequence { seq: 9 })
    );
    assert_eq!(pool.plan_step(&[]).unwrap_err(), KvPoolError::EmptyStep);
    assert_eq!(
        KvPoolError::Exhausted {
            requested: 3,
            available: 2
        }
        .to_string(),
        "KV pool exhausted: 3 slots requested, 2 free"
    );
}

#[test]
fn pool_writes_go_through_the_fused_op_and_refusals_change_nothing() {
    for (name, device) in devices() {
        let config = RopePoolConfig::new(8, 4, 2).with_rope_base(10_000.0);
        let mut pool = KvPool::try_new(config.clone(), 8, &device, DType::F32).unwrap();
        // Sequence 7 holds two rows; a step of three more tokens continues it.
        pool.plan_step(&tokens(7, 0, 2)).unwrap();
        let step = pool.plan_step(&tokens(7, 2, 3)).unwrap();
        let (positions, slots) = burn_rope_pool::testing::step_slots(&step);
        assert_eq!(
            (&positions[..], &slots[..]),
            (&[2, 3, 4][..], &[2, 3, 4][..])
        );
        let mut case = Case::random(config.clone(), 3, 8, 100, 61);
        case.k_pool = vec![0.0; case.k_pool.len()];
        case.v_pool = vec![0.0; case.v_pool.len()];
        (case.positions, case.slots) = (positions, slots);
        let t = case.tensors(&device, DType::F32);
        let (q_rot, k_rot) = pool.write(0, &step, t.q, t.k, t.v, None).unwrap();
        let expected = case.rounded(DType::F32).reference();
        let close = |a: Vec<f64>, e: &[f64], what: &str| {
            let err = burn_rope_pool::testing::norm_relative_error(&a, e);
            assert!(err <= 1e-5, "{name}: {what} error {err:e}");
        };
        close(host(q_rot), &expected.q_rot, "q_rot");
        close(host(k_rot), &expected.k_rot, "k_rot");
        close(
            host(pool.k(0).clone().into_float()),
            &expected.k_pool,
            "k_pool",
        );
        close(
            host(pool.v(0).clone().into_float()),
            &expected.v_pool,
            "v_pool",
        );

        // A refused call (q with the wrong head count) leaves the pool as it was.
        let before = host(pool.k(0).clone().into_float());
        let bad_q = Tensor::<3>::ones([1, 3, 8], &device);
        let (k1, v1) = (
            Tensor::<3>::ones([1, 2, 8], &device),
            Tensor::<3>::ones([1, 2, 8], &device),
        );
        let step = pool.plan_step(&tokens(8, 0, 1)).unwrap();
        let err = pool.write(0, &step, bad_q, k1, v1, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "q shape must be [num_tokens, num_qo_heads, head_dim], got [1, 3, 8]"
        );
        assert_eq!(
            host(pool.k(0).clone().into_float()),
            before,
            "{name}: refused write changed the pool"
        );
    }
}

/// Sizes a pool cannot have are refused before anything is allocated: more rows than i32 slots
/// address, and more bytes than the system can give (this aborted the process on Flex).
#[test]
fn impossible_pools_are_refused() {
    let device = burn::tensor::Device::flex();
    let config = RopePoolConfig::new(128, 32, 8);
    let err = KvPool::try_new(config.clone(), usize::MAX, &device, DType::F16).unwrap_err();
    assert!(matches!(err, KvPoolError::TooManyRows { .. }), "{err}");
    let err = KvPool::try_new(config.clone(), 1 << 40, &device, DType::F16).unwrap_err();
    assert!(matches!(err, KvPoolError::TooManyRows { .. }), "{err}");
    let err = KvPool::try_new(config.clone(), 1 << 30, &device, DType::F16).unwrap_err();
    assert!(matches!(err, KvPoolError::Memory { .. }), "{err}");
    assert!(
        err.to_string().contains("the system has available"),
        "{err}"
    );
    let pool = KvPool::try_new(config, 16, &device, DType::F16).unwrap();
    assert_eq!(pool.available(), 16);
    assert_eq!(
        pool.k(0).stored_shape().dims::<3>(),
        [16, 8, 128],
        "one layer"
    );
}
