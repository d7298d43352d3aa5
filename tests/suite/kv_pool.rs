//! The KV pool and its slot allocator: allocation order, release and reuse, exhaustion as an
//! error, and writes through the fused op that keep the pool (or leave it as it was).

use crate::common::{Case, devices, host};
use burn::tensor::{DType, Tensor};
use burn_rope_pool::RopePoolConfig;
use burn_rope_pool::pool::{KvPool, KvPoolError, SlotAllocator};

#[test]
fn allocator_hands_out_reuses_and_refuses() {
    let mut slots = SlotAllocator::new(6);
    assert_eq!(slots.allocate(1, 3).unwrap(), vec![0, 1, 2]);
    assert_eq!(slots.allocate(2, 2).unwrap(), vec![3, 4]);
    assert_eq!(slots.allocate(1, 1).unwrap(), vec![5]);
    assert_eq!(slots.rows(1), Some(&[0, 1, 2, 5][..]));
    assert_eq!(
        slots.allocate(3, 1),
        Err(KvPoolError::Exhausted {
            requested: 1,
            available: 0
        })
    );
    assert_eq!(slots.release(1), Ok(4));
    assert_eq!(slots.available(), 4);
    assert_eq!(
        slots.allocate(3, 2).unwrap(),
        vec![0, 1],
        "freed rows are reused, lowest first"
    );
    assert_eq!(
        slots.allocate(4, 3),
        Err(KvPoolError::Exhausted {
            requested: 3,
            available: 2
        })
    );
    assert_eq!(slots.available(), 2, "a refused request allocates nothing");
    assert_eq!(
        slots.release(9),
        Err(KvPoolError::UnknownSequence { seq: 9 })
    );
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
        let mut pool = KvPool::new(config.clone(), 8, &device, DType::F32);
        let rows = pool.slots.allocate(7, 3).unwrap();
        let mut case = Case::random(config.clone(), 3, 8, 100, 61);
        case.k_pool = vec![0.0; case.k_pool.len()];
        case.v_pool = vec![0.0; case.v_pool.len()];
        case.slots = rows.iter().map(|&r| r as i64).collect();
        let t = case.tensors(&device, DType::F32);
        let (q_rot, k_rot) = pool
            .write(t.q, t.k, t.v, &case.positions, &case.slots)
            .unwrap();
        let expected = case.rounded(DType::F32).reference();
        let close = |a: Vec<f64>, e: &[f64], what: &str| {
            let err = burn_rope_pool::testing::norm_relative_error(&a, e);
            assert!(err <= 1e-5, "{name}: {what} error {err:e}");
        };
        close(host(q_rot), &expected.q_rot, "q_rot");
        close(host(k_rot), &expected.k_rot, "k_rot");
        close(
            host(pool.k().clone().into_float()),
            &expected.k_pool,
            "k_pool",
        );
        close(
            host(pool.v().clone().into_float()),
            &expected.v_pool,
            "v_pool",
        );

        // A refused call (q with the wrong head count) leaves the pool as it was.
        let before = host(pool.k().clone().into_float());
        let bad_q = Tensor::<3>::ones([1, 3, 8], &device);
        let (k1, v1) = (
            Tensor::<3>::ones([1, 2, 8], &device),
            Tensor::<3>::ones([1, 2, 8], &device),
        );
        let err = pool.write(bad_q, k1, v1, &[5], &[6]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "q shape must be [num_tokens, num_qo_heads, head_dim], got [1, 3, 8]"
        );
        assert_eq!(
            host(pool.k().clone().into_float()),
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
    assert!(matches!(
        SlotAllocator::try_new(1 << 40),
        Err(KvPoolError::TooManyRows { .. })
    ));
    let err = KvPool::try_new(config.clone(), 1 << 30, &device, DType::F16).unwrap_err();
    assert!(matches!(err, KvPoolError::Memory { .. }), "{err}");
    assert!(
        err.to_string().contains("the system has available"),
        "{err}"
    );
    let pool = KvPool::try_new(config, 16, &device, DType::F16).unwrap();
    assert_eq!(pool.slots.available(), 16);
}
