//! The LLaMA attention layer on the fused op against an unfused path (plain tensor ops: NeoX
//! rotation, keys and values kept whole, no pool): prefill, decode, ragged batches, slot reuse,
//! pool exhaustion.

use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_rope_pool::model::{LlamaAttention, LlamaAttentionConfig};
use burn_rope_pool::pool::SeqToken;
use burn_rope_pool::pool::{KvPool, KvPoolError};

/// One step of the layer as a one-layer model runs it: plan, forward, and the rows given back if
/// the forward is refused.
fn forward(
    layer: &LlamaAttention,
    x: Tensor<2>,
    tokens: &[SeqToken],
    pool: &mut KvPool,
) -> Result<Tensor<2>, KvPoolError> {
    let step = pool.plan_step(tokens)?;
    let out = layer.forward(x, 0, &step, pool);
    if out.is_err() {
        pool.cancel_step(step);
    }
    out
}

fn config() -> LlamaAttentionConfig {
    LlamaAttentionConfig {
        hidden: 64,
        num_qo_heads: 4,
        num_kv_heads: 2,
        head_dim: 16,
        rope_base: 10_000.0,
    }
}

fn max_abs(a: Tensor<2>, b: Tensor<2>) -> f32 {
    (a - b).abs().max().into_scalar::<f32>()
}

fn check_device(device: &Device) {
    let cfg = config();
    let layer = cfg.init(device).expect("a valid layer");
    let (a_len, b_len) = (7usize, 4usize);
    let xa = Tensor::<2>::random(
        [a_len + 3, cfg.hidden],
        Distribution::Normal(0.0, 1.0),
        device,
    );
    let xb = Tensor::<2>::random([b_len, cfg.hidden], Distribution::Normal(0.0, 1.0), device);
    let ref_a = layer.forward_unfused(xa.clone());
    let ref_b = layer.forward_unfused(xb.clone());
    let mut pool = KvPool::try_new(cfg.rope(), 32, device, DType::F32).unwrap();

    // Ragged prefill: sequence 1 (7 tokens) and sequence 2 (4 tokens) in one batch.
    let x = Tensor::cat(vec![xa.clone().slice([0..a_len]), xb.clone()], 0);
    let mut tokens: Vec<SeqToken> = (0..a_len)
        .map(|p| SeqToken {
            seq: 1,
            position: p,
        })
        .collect();
    tokens.extend((0..b_len).map(|p| SeqToken {
        seq: 2,
        position: p,
    }));
    let out = forward(&layer, x, &tokens, &mut pool).unwrap();
    let err_a = max_abs(
        out.clone().slice([0..a_len]),
        ref_a.clone().slice([0..a_len]),
    );
    let err_b = max_abs(out.slice([a_len..a_len + b_len]), ref_b);
    assert!(
        err_a < 1e-4 && err_b < 1e-4,
        "prefill errors {err_a} {err_b}"
    );

    // Sequence 2 finishes; its rows are reused by sequence 3 while sequence 1 decodes.
    pool.release(2).unwrap();
    let xc = Tensor::<2>::random([2, cfg.hidden], Distribution::Normal(0.0, 1.0), device);
    let ref_c = layer.forward_unfused(xc.clone());
    for (step, prefix) in (a_len..a_len + 3).enumerate() {
        let x = Tensor::cat(
            vec![
                xa.clone().slice([prefix..prefix + 1]),
                xc.clone().slice([0..1]),
            ],
            0,
        );
        let tokens = [
            SeqToken {
                seq: 1,
                position: prefix,
            },
            SeqToken {
                seq: 3 + step as u64,
                position: 0,
            },
        ];
        let out = forward(&layer, x, &tokens, &mut pool).unwrap();
        // Decoding token `prefix` equals the whole-sequence prefill at that row.
        let err = max_abs(
            out.clone().slice([0..1]),
            ref_a.clone().slice([prefix..prefix + 1]),
        );
        assert!(err < 1e-4, "decode step {step}: {err}");
        let err_c = max_abs(out.slice([1..2]), ref_c.clone().slice([0..1]));
        assert!(
            err_c < 1e-4,
            "new sequence on reused rows, step {step}: {err_c}"
        );
        pool.release(3 + step as u64).unwrap();
    }

    // Exhaustion is an error, and allocates nothing.
    let free = pool.available();
    let x = Tensor::<2>::random([free + 1, cfg.hidden], Distribution::Default, device);
    let tokens: Vec<SeqToken> = (0..free + 1)
        .map(|p| SeqToken {
            seq: 9,
            position: p,
        })
        .collect();
    let err = forward(&layer, x, &tokens, &mut pool).unwrap_err();
    assert_eq!(
        err,
        KvPoolError::Exhausted {
            requested: free + 1,
            available: free
        }
    );
    assert_eq!(pool.available(), free);

    // A call the op refuses (a pool of another geometry) gives back the rows it took, and keeps
    // the rows the sequences held before.
    let mut wrong = KvPool::try_new(
        burn_rope_pool::RopePoolConfig::new(cfg.head_dim, cfg.num_qo_heads, cfg.num_kv_heads + 1),
        8,
        device,
        DType::F32,
    )
    .unwrap();
    let held = [0, 1].map(|position| SeqToken { seq: 3, position });
    wrong.plan_step(&held).unwrap();
    let x = Tensor::<2>::random([2, cfg.hidden], Distribution::Default, device);
    let tokens = [
        SeqToken {
            seq: 3,
            position: 2,
        },
        SeqToken {
            seq: 4,
            position: 0,
        },
    ];
    let err = forward(&layer, x, &tokens, &mut wrong).unwrap_err();
    assert!(matches!(err, KvPoolError::Op(_)), "{err}");
    assert_eq!(wrong.available(), 6);
    assert_eq!(wrong.rows(3), Some(&[0, 1][..]));
    assert_eq!(wrong.rows(4), None);
}

#[test]
fn attention_layer_matches_the_unfused_path() {
    for (name, device) in crate::common::devices() {
        eprintln!("device {name}");
        check_device(&device);
    }
}

/// A token whose position is not where its sequence's rows end is refused, the pool unchanged
/// (it used to panic when it skipped ahead, or attend over the wrong rows when it fell behind).
#[test]
fn positions_that_skip_or_repeat_are_refused() {
    let device = Device::flex();
    let cfg = config();
    let layer = cfg.init(&device).expect("a valid layer");
    let mut pool = KvPool::try_new(cfg.rope(), 16, &device, DType::F32).unwrap();
    let x = |n: usize| Tensor::<2>::random([n, cfg.hidden], Distribution::Default, &device);
    let at = |seq, position| SeqToken { seq, position };
    forward(&layer, x(2), &[at(1, 0), at(1, 1)], &mut pool).unwrap();
    for (tokens, message) in [
        (
            vec![at(1, 5)],
            "sequence 1: token at position 5 where position 2 comes next",
        ),
        (
            vec![at(1, 1)],
            "sequence 1: token at position 1 where position 2 comes next",
        ),
        (
            vec![at(2, 0), at(2, 0)],
            "sequence 2: token at position 0 where position 1 comes next",
        ),
    ] {
        let err: KvPoolError = forward(&layer, x(tokens.len()), &tokens, &mut pool).unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    assert_eq!(pool.available(), 14, "a refused batch took no rows");
    assert!(pool.rows(2).is_none());
}

/// Heads that do not group, or a head size past the op's, are refused by `init` (they panicked
/// in a reshape); on Autodiff the unfused reference runs and the pooled forward is refused
/// without keeping the rows it took.
#[test]
fn layers_that_cannot_run_are_refused() {
    let device = Device::flex();
    let bad = |num_qo_heads, num_kv_heads, head_dim| {
        LlamaAttentionConfig {
            num_qo_heads,
            num_kv_heads,
            head_dim,
            ..config()
        }
        .init(&device)
        .err()
        .map(|e| e.to_string())
    };
    assert_eq!(
        bad(6, 4, 16).as_deref(),
        Some("num_qo_heads must be a multiple of num_kv_heads, got 6 and 4")
    );
    assert_eq!(
        bad(4, 0, 16).as_deref(),
        Some("num_qo_heads must be a multiple of num_kv_heads, got 4 and 0")
    );
    assert_eq!(
        bad(4, 2, 1024).as_deref(),
        Some("invalid attention parameter: head_dim must be in 1..=512, got 1024")
    );
    #[cfg(feature = "autodiff")]
    {
        let device = Device::flex().autodiff();
        let cfg = config();
        let layer = cfg.init(&device).expect("a valid layer");
        let x = Tensor::<2>::random([3, cfg.hidden], Distribution::Default, &device);
        assert_eq!(layer.forward_unfused(x.clone()).dims(), [3, cfg.hidden]);
        let mut pool = KvPool::try_new(cfg.rope(), 8, &device, DType::F32).unwrap();
        let tokens: Vec<SeqToken> = (0..3)
            .map(|position| SeqToken { seq: 1, position })
            .collect();
        let err = forward(&layer, x, &tokens, &mut pool).unwrap_err();
        assert!(err.to_string().contains("inference only"), "{err}");
        assert_eq!(pool.available(), 8, "a refused batch took no rows");
        assert!(pool.rows(1).is_none());
    }
}
