//! A fuzzer over everything a caller controls: ranks and dims of all seven tensors, float and
//! integer dtypes, head counts, head_dim, rope bases, every variant with sane and broken
//! settings, checked mode, positions over the whole i32 range (and past it in 64-bit tensors),
//! slots negative, past the pool, past i32, duplicated. On Flex and wgpu. Every call must either
//! return one of the documented messages and leave the pools the caller holds unchanged, or
//! return the exact result: q_rot/k_rot against the float64 reference, every pool row that no
//! valid slot names still holding its sentinel, every named row holding what its token wrote.
//!
//! CI runs `ROPE_POOL_FUZZ_CASES` (default 1000) seeds per device; the longer run in the README
//! sets it higher.

use crate::common::{Rng, devices, round_to};
use burn::tensor::{DType, Device, DispatchTensor, Int, Tensor, TensorData};
use burn_rope_pool::pool::PoolTensor;
use burn_rope_pool::testing::norm_relative_error;
use burn_rope_pool::testing::reference::rope_pool_reference;
use burn_rope_pool::{
    MRope, QkNorm, RopePoolConfig, RopePoolInputs, RopeScaling, RopeStyle, rope_pool_fused,
};

/// The messages of the README's error table; `{}` stands for a value.
pub const DOCUMENTED: &[&str] = &[
    "rope_pool_fused expects q/k/v to be 3-D",
    "rope_pool_fused expects positions/slots to be 1-D",
    "positions must be [3, num_tokens] for mrope, got {}",
    "rope_pool_fused expects pool tensors to be 3-D",
    "q shape must be [num_tokens, num_qo_heads, head_dim], got {}",
    "k shape must be [num_tokens, num_kv_heads, head_dim], got {}",
    "v shape must match k shape, got {} vs {}",
    "positions/slots must have one entry per token",
    "k_pool has incompatible shape {}",
    "v_pool shape must match k_pool shape, got {} vs {}",
    "q/k/v dtypes must match",
    "pool dtypes must match q/k/v dtype",
    "head_dim must be even and > 0, got {}",
    "num_qo_heads and num_kv_heads must be > 0, got {} and {}",
    "rope_base must be positive and finite, got {}",
    "rotary_dim must be even and in 2..=head_dim, got {} for head_dim {}",
    "mrope_section must sum to rotary_dim / 2, got {} for rotary_dim {}",
    "invalid rope scaling: {}",
    "rope_pool_fused supports f32, f16 and bf16 tensors, got {}",
    "{} is not supported on {}",
    "slot {} of token {} is outside the pool of {} rows",
    "slot {} is written by both token {} and token {}",
    "position {} at positions[{}] is outside the i32 range",
    "q_norm/k_norm weights must be [head_dim] = [{}], got {} and {}",
    "q_norm/k_norm weight dtypes must match q/k/v dtype",
    "qk_norm_eps must be >= 0 and finite in f32, got {}",
    "the fused q/k norm supports head_dim up to 512, got {}",
    "k_pool and v_pool must both be float or both be fp8",
    "fp8 pools are U32 words, got {} and {}",
    "fp8 pools need head_dim to be a multiple of 4, got {}",
    "fp8 pools need rotary_dim / 2 to be a multiple of 4, got rotary_dim {}",
    "fp8 pool scales must be in 2^-100..=2^100, got {}",
];

/// Whether `message` is `template` with each `{}` replaced by some non-empty text.
pub fn matches(template: &str, message: &str) -> bool {
    let parts: Vec<&str> = template.split("{}").collect();
    let Some(rest) = message.strip_prefix(parts[0]) else {
        return false;
    };
    if parts.len() == 1 {
        return rest.is_empty();
    }
    let mut rest = rest;
    for (i, part) in parts.iter().enumerate().skip(1) {
        let last = i == parts.len() - 1;
        let at = if last {
            rest.len()
                .checked_sub(part.len())
                .filter(|&at| rest[at..] == **part)
        } else {
            rest.get(1..).and_then(|r| r.find(part)).map(|at| at + 1)
        };
        match at {
            Some(at) if at > 0 => rest = &rest[at + part.len()..],
            _ => return false,
        }
    }
    rest.is_empty()
}

/// The pools' fill: exact in every float dtype, never a value the op writes here.
const SENTINEL: f64 = 4096.0;

/// One fuzzed call.
struct Call {
    config: RopePoolConfig,
    /// Dims of q, k, v, positions, slots, k_pool, v_pool.
    dims: [Vec<usize>; 7],
    /// dtypes of q, k, v, k_pool, v_pool.
    float_dtypes: [DType; 5],
    /// dtypes of positions and slots.
    int_dtypes: [DType; 2],
    positions: Vec<i64>,
    slots: Vec<i64>,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    /// Whether the caller keeps handles to the pools (the op then copies them).
    keep_pools: bool,
}

fn pick<T: Clone>(rng: &mut Rng, items: &[T]) -> T {
    items[rng.below(items.len() as u64) as usize].clone()
}

/// `good`, or when the call is not `sane` sometimes a broken setting.
fn setting(rng: &mut Rng, sane: bool, good: f64) -> f64 {
    if sane {
        return good;
    }
    match rng.below(12) {
        0 => 0.0,
        1 => -good,
        2 => f64::NAN,
        3 => f64::INFINITY,
        4 => 1e300,
        _ => good,
    }
}

fn scaling(rng: &mut Rng, sane: bool, half: usize) -> RopeScaling {
    let len = if !sane && rng.below(6) == 0 {
        half + 1
    } else {
        half
    };
    match rng.below(6) {
        0 => RopeScaling::Linear {
            factor: setting(rng, sane, 4.0),
        },
        1 => RopeScaling::Llama3 {
            factor: setting(rng, sane, 8.0),
            low_freq_factor: setting(rng, sane, 1.0),
            high_freq_factor: setting(rng, sane, 4.0),
            original_max_position_embeddings: setting(rng, sane, 8192.0),
        },
        2 => {
            let factor = setting(rng, sane, 4.0);
            RopeScaling::yarn(factor, Some(setting(rng, sane, 4096.0)), None)
        }
        3 => RopeScaling::LongRope {
            short_factor: (0..len).map(|i| 1.0 + i as f64 / 4.0).collect(),
            long_factor: (0..len)
                .map(|i| setting(rng, sane, 2.0 + i as f64))
                .collect(),
            original_max_position_embeddings: Some(setting(rng, sane, 1000.0)),
            max_position_embeddings: Some(64_000.0),
            attention_factor: None,
            factor: None,
        },
        _ => RopeScaling::None,
    }
}

/// Dims `good`, or when the call is not `sane` sometimes with a dim changed, dropped or added.
fn mutate(rng: &mut Rng, sane: bool, good: Vec<usize>) -> Vec<usize> {
    let mut dims = good;
    if sane {
        return dims;
    }
    match rng.below(6) {
        0 if !dims.is_empty() => {
            let at = rng.below(dims.len() as u64) as usize;
            dims[at] = rng.below(5) as usize;
        }
        // Burn has no rank-0 tensors.
        1 if dims.len() > 1 => {
            dims.pop();
        }
        2 => dims.push(1 + rng.below(2) as usize),
        _ => {}
    }
    dims
}

fn int_value(rng: &mut Rng, dtype: DType, small: i64) -> i64 {
    let v = match rng.below(8) {
        0 => rng.next_u64() as i32 as i64,
        1 => pick(
            rng,
            &[i32::MIN as i64, i32::MAX as i64, -1, 1 << 24, -(1 << 24)],
        ),
        2 => rng.next_u64() as i64,
        _ => small,
    };
    // The value the tensor holds (a u64 as its i64 bit pattern).
    match dtype {
        DType::I8 => v as i8 as i64,
        DType::U8 => v as u8 as i64,
        DType::I16 => v as i16 as i64,
        DType::U16 => v as u16 as i64,
        DType::U32 => v as u32 as i64,
        DType::I32 => v as i32 as i64,
        _ => v,
    }
}

impl std::fmt::Debug for Call {
    /// Everything but the float values (which the seed reproduces).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("config", &self.config)
            .field("dims", &self.dims)
            .field("float_dtypes", &self.float_dtypes)
            .field("int_dtypes", &self.int_dtypes)
            .field("positions", &self.positions)
            .field("slots", &self.slots)
            .field("keep_pools", &self.keep_pools)
            .finish()
    }
}

impl Call {
    fn random(rng: &mut Rng, device: &Device) -> Self {
        // Half the calls are well-formed (their refusals come from the data: checked mode);
        // the others break some of the settings, shapes and dtypes.
        let sane = rng.below(2) == 0;
        let broken = |rng: &mut Rng| !sane && rng.below(4) == 0;
        let head_dim = match broken(rng) {
            true => pick(rng, &[0, 3, 5]),
            false => pick(rng, &[2, 4, 8, 8, 16, 16, 32, 6]),
        };
        let num_kv_heads = if broken(rng) {
            0
        } else {
            pick(rng, &[1, 1, 2, 3])
        };
        let num_qo_heads = num_kv_heads * pick(rng, &[1, 2, 4]) + broken(rng) as usize;
        let tokens = pick(rng, &[1, 2, 5, 9, 0]);
        let pool = pick(rng, &[1, 4, 12, 12, 0]);
        let base = pick(rng, &[10_000.0, 500_000.0, 1e6, 2.0]);
        let mut config = RopePoolConfig::new(head_dim, num_qo_heads, num_kv_heads)
            .with_rope_base(setting(rng, sane, base))
            .with_check_slots(rng.below(3) == 0)
            .with_k_rot(rng.below(4) != 0);
        if rng.below(3) == 0 {
            config = config.with_style(RopeStyle::Gptj);
        }
        let mut rotary_dim = head_dim;
        if rng.below(4) == 0 {
            rotary_dim = match broken(rng) {
                true => pick(rng, &[head_dim + 2, 3, 0]),
                false => 2 * (1 + rng.below(head_dim.max(2) as u64 / 2) as usize),
            };
            config = config.with_rotary_dim(Some(rotary_dim));
        }
        let half = rotary_dim / 2;
        if rng.below(3) == 0 {
            config = config.with_scaling(scaling(rng, sane, half));
        }
        if rng.below(5) == 0 {
            let t = rng.below(half as u64 + 1) as usize;
            let h = rng.below((half - t) as u64 + 1) as usize;
            let w = half - t - h + broken(rng) as usize;
            config = config.with_mrope(Some(MRope {
                section: [t, h, w],
                interleaved: rng.below(2) == 0,
            }));
        }
        let rows = if config.mrope.is_some() { 3 } else { 1 };

        let float = [DType::F32, DType::F32, DType::F16, DType::BF16];
        let mut float_dtypes = [pick(rng, &float); 5];
        if broken(rng) {
            float_dtypes[rng.below(5) as usize] = pick(rng, &float);
        }
        let ints: Vec<DType> = [DType::I32, DType::I32, DType::I64, DType::I64, DType::I8]
            .into_iter()
            .chain([DType::U8, DType::I16, DType::U16, DType::U32, DType::U64])
            .filter(|&d| device.supports_dtype(d))
            .collect();
        let int_dtypes = [pick(rng, &ints), pick(rng, &ints)];

        let positions_dims = if rows == 3 {
            vec![3, tokens]
        } else {
            vec![tokens]
        };
        let dims = [
            mutate(rng, sane, vec![tokens, num_qo_heads, head_dim]),
            mutate(rng, sane, vec![tokens, num_kv_heads, head_dim]),
            mutate(rng, sane, vec![tokens, num_kv_heads, head_dim]),
            mutate(rng, sane, positions_dims),
            mutate(rng, sane, vec![tokens]),
            mutate(rng, sane, vec![pool, num_kv_heads, head_dim]),
            mutate(rng, sane, vec![pool, num_kv_heads, head_dim]),
        ];
        let len = |d: &Vec<usize>| d.iter().product::<usize>();
        let positions = (0..len(&dims[3]))
            .map(|t| {
                let small = t as i64 + rng.below(5000) as i64;
                int_value(rng, int_dtypes[0], small)
            })
            .collect();
        let slots = (0..len(&dims[4]))
            .map(|_| {
                let small = rng.below(pool as u64 + 4) as i64 - 2;
                int_value(rng, int_dtypes[1], small)
            })
            .collect();
        Self {
            q: rng.values(len(&dims[0])),
            k: rng.values(len(&dims[1])),
            v: rng.values(len(&dims[2])),
            config,
            dims,
            float_dtypes,
            int_dtypes,
            positions,
            slots,
            keep_pools: rng.below(2) == 0,
        }
    }
}

fn float_arg(values: &[f64], dims: &[usize], device: &Device, dtype: DType) -> DispatchTensor {
    let values: Vec<f32> = values.iter().map(|&x| x as f32).collect();
    let data = TensorData::new(values, dims.to_vec());
    match dims.len() {
        1 => Tensor::<1>::from_data(data, (device, dtype)).into_dispatch(),
        2 => Tensor::<2>::from_data(data, (device, dtype)).into_dispatch(),
        3 => Tensor::<3>::from_data(data, (device, dtype)).into_dispatch(),
        _ => Tensor::<4>::from_data(data, (device, dtype)).into_dispatch(),
    }
}

fn int_arg(values: &[i64], dims: &[usize], device: &Device, dtype: DType) -> DispatchTensor {
    let data = match dtype {
        DType::I8 => TensorData::new(values.iter().map(|&v| v as i8).collect(), dims.to_vec()),
        DType::U8 => TensorData::new(values.iter().map(|&v| v as u8).collect(), dims.to_vec()),
        DType::U16 => TensorData::new(values.iter().map(|&v| v as u16).collect(), dims.to_vec()),
        DType::U64 => TensorData::new(values.iter().map(|&v| v as u64).collect(), dims.to_vec()),
        DType::I16 => TensorData::new(values.iter().map(|&v| v as i16).collect(), dims.to_vec()),
        DType::U32 => TensorData::new(values.iter().map(|&v| v as u32).collect(), dims.to_vec()),
        DType::I32 => TensorData::new(values.iter().map(|&v| v as i32).collect(), dims.to_vec()),
        _ => TensorData::new(values.to_vec(), dims.to_vec()),
    };
    let options = (device, dtype);
    match dims.len() {
        1 => Tensor::<1, Int>::from_data(data, options).into_dispatch(),
        2 => Tensor::<2, Int>::from_data(data, options).into_dispatch(),
        3 => Tensor::<3, Int>::from_data(data, options).into_dispatch(),
        _ => Tensor::<4, Int>::from_data(data, options).into_dispatch(),
    }
}

/// A pool of `dims` full of the sentinel, with any rank.
fn pool(dims: &[usize], device: &Device, dtype: DType) -> (DispatchTensor, Option<Tensor<3>>) {
    let values = vec![SENTINEL; dims.iter().product()];
    if dims.len() == 3 {
        let t = Tensor::<3>::from_data(
            TensorData::new(values.iter().map(|&x| x as f32).collect(), dims.to_vec()),
            (device, dtype),
        );
        (t.clone().into_dispatch(), Some(t))
    } else {
        (float_arg(&values, dims, device, dtype), None)
    }
}

fn host(t: Tensor<3>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

/// Runs one call and checks it; returns the error message, if any.
fn check(call: &Call, device: &Device, what: &str) -> Option<String> {
    let [q_dims, k_dims, v_dims, p_dims, s_dims, kp_dims, vp_dims] = &call.dims;
    let [dq, dk, dv, dkp, dvp] = call.float_dtypes;
    let (k_pool, kept_k) = pool(kp_dims, device, dkp);
    let (v_pool, kept_v) = pool(vp_dims, device, dvp);
    let (kept_k, kept_v) = if call.keep_pools {
        (kept_k, kept_v)
    } else {
        (None, None)
    };
    let inputs = RopePoolInputs {
        q: float_arg(&call.q, q_dims, device, dq),
        k: float_arg(&call.k, k_dims, device, dk),
        v: float_arg(&call.v, v_dims, device, dv),
        positions: int_arg(&call.positions, p_dims, device, call.int_dtypes[0]),
        slots: int_arg(&call.slots, s_dims, device, call.int_dtypes[1]),
        k_pool: PoolTensor::Float(k_pool),
        v_pool: PoolTensor::Float(v_pool),
        qk_norm: QkNorm::None,
    };
    let result = rope_pool_fused(inputs, &call.config);
    let out = match result {
        Err(e) => {
            let message = e.to_string();
            assert!(
                DOCUMENTED.iter().any(|t| matches(t, &message)),
                "{what}: undocumented error `{message}` ({e:?})"
            );
            for kept in [kept_k, kept_v].into_iter().flatten() {
                assert!(
                    host(kept).iter().all(|&x| x == SENTINEL),
                    "{what}: a refused call (`{message}`) changed a pool"
                );
            }
            return Some(message);
        }
        Ok(out) => out,
    };
    for kept in [kept_k, kept_v].into_iter().flatten() {
        assert!(
            host(kept).iter().all(|&x| x == SENTINEL),
            "{what}: a pool the caller still holds changed"
        );
    }
    let dtype = dq;
    let rounded = |v: &[f64]| -> Vec<f64> { v.iter().map(|&x| round_to(x, dtype)).collect() };
    let (q, k, v) = (rounded(&call.q), rounded(&call.k), rounded(&call.v));
    // Unchecked mode takes a position as its low 32 bits.
    let positions: Vec<i64> = call.positions.iter().map(|&p| p as i32 as i64).collect();
    let pool_rows = kp_dims[0];
    let sentinel_pool = vec![SENTINEL; kp_dims.iter().product()];
    let expected = rope_pool_reference(
        &call.config,
        [&q, &k, &v],
        &positions,
        &call.slots,
        [&sentinel_pool, &sentinel_pool],
    );
    let tolerance = burn_rope_pool::testing::tolerance(dtype);
    let k_rot_dims = out.k_rot.dims();
    let (q_rot, mut k_rot) = (host(out.q_rot), host(out.k_rot));
    if !call.config.k_rot {
        // Not returned: empty; the pool rows are checked against the reference's keys instead.
        assert_eq!(
            k_rot_dims,
            [0, k_dims[1], k_dims[2]],
            "{what}: k_rot not empty"
        );
        k_rot = expected.k_rot.iter().map(|&x| round_to(x, dtype)).collect();
    }
    for (name, a, e) in [
        ("q_rot", &q_rot, &expected.q_rot),
        ("k_rot", &k_rot, &expected.k_rot),
    ] {
        let err = norm_relative_error(a, e);
        assert!(
            err <= tolerance,
            "{what}: {name} off by {err:e} norm-relative"
        );
    }
    let (k_pool, v_pool) = (host(out.k_pool.into_float()), host(out.v_pool.into_float()));
    let row = kp_dims[1] * kp_dims[2];
    for r in 0..pool_rows {
        let writers: Vec<usize> = (0..call.slots.len())
            .filter(|&t| call.slots[t] == r as i64)
            .collect();
        let (kr, vr) = (&k_pool[r * row..][..row], &v_pool[r * row..][..row]);
        if writers.is_empty() {
            assert!(
                kr.iter().chain(vr).all(|&x| x == SENTINEL),
                "{what}: pool row {r} changed though no slot names it"
            );
        } else {
            // Duplicate slots (a caller error in unchecked mode) race: each element holds what
            // one of the writers wrote there.
            for e in 0..row {
                assert!(
                    writers.iter().any(|&t| {
                        let want = k_rot[t * row + e];
                        // The reference rounded to the dtype is within one rounding of the device.
                        kr[e] == want
                            || (!call.config.k_rot
                                && (kr[e] - want).abs() <= 2.0 * tolerance * want.abs().max(1.0))
                    }),
                    "{what}: k_pool row {r}[{e}] holds none of its writers' values {writers:?}"
                );
                assert!(
                    writers.iter().any(|&t| vr[e] == v[t * row + e]),
                    "{what}: v_pool row {r}[{e}] holds none of its writers' values {writers:?}"
                );
            }
        }
    }
    None
}

#[test]
fn fuzzed_calls_give_documented_errors_or_exact_results() {
    let cases = crate::common::env_count("ROPE_POOL_FUZZ_CASES", 1000) as u64;
    for (device_name, device) in devices() {
        let (mut refused, mut ran) = (0, 0);
        for seed in 0..cases {
            let mut rng = Rng::new(seed + 1);
            let call = Call::random(&mut rng, &device);
            let what = format!("{device_name} seed {seed}: {call:?}");
            match check(&call, &device, &what) {
                Some(_) => refused += 1,
                None => ran += 1,
            }
        }
        eprintln!("fuzz {device_name}: {cases} calls, {ran} ran, {refused} refused");
        // The generator must exercise both sides.
        assert!(
            ran * 10 >= cases && refused * 10 >= cases,
            "{ran} ran, {refused} refused"
        );
    }
}

#[test]
fn the_message_matcher_is_strict() {
    assert!(matches(
        "slot {} of token {} is outside the pool of {} rows",
        "slot 9 of token 1 is outside the pool of 4 rows"
    ));
    assert!(!matches(
        "slot {} of token {} is outside the pool of {} rows",
        "slot 9 of token 1 is outside the pool of 4 rows!"
    ));
    assert!(!matches(
        "q/k/v dtypes must match",
        "q/k/v dtypes must match."
    ));
    assert!(!matches(
        "head_dim must be even and > 0, got {}",
        "head_dim must be even and > 0, got "
    ));
}
