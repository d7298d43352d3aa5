//! Test support: the devices under test, random cases, poisoning, and scoring against the f64
//! reference.

#[cfg(feature = "wgpu")]
use burn::tensor::DeviceKind;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn_rope_pool::reference::{ReferenceOutput, rope_pool_reference};
use burn_rope_pool::{
    RopePoolConfig, RopePoolError, RopePoolInputs, RopePoolOutputs, rope_pool_fused,
};

/// The GPU runtime under test: wgpu in builds with it (CI: Mesa's software Vulkan), else CUDA
/// (a `--no-default-features --features cuda,flex,autodiff` build, run on an NVIDIA GPU).
#[cfg(feature = "wgpu")]
pub const GPU: &str = "wgpu";
#[cfg(not(feature = "wgpu"))]
pub const GPU: &str = "cuda";

/// No GPU device to test on, for `reason`: with `CI=true` the run fails (CI installs Mesa's
/// software Vulkan so that the real kernels run); otherwise the GPU tests are skipped.
fn no_gpu(reason: &str) -> Option<Device> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but {reason} (scripts/test.sh installs and picks what CI needs)");
    }
    eprintln!("{GPU} tests skipped: {reason}");
    None
}

/// The GPU device under test ([`GPU`]), when this machine opens one.
pub fn gpu_device() -> Option<Device> {
    #[cfg(feature = "wgpu")]
    {
        if let Some(reason) = burn_rope_pool::testing::wgpu_refusal() {
            return no_gpu(reason);
        }
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        if burn_rope_pool::testing::device_works(&device) {
            return Some(device);
        }
        no_gpu("no wgpu adapter here (install mesa-vulkan-drivers)")
    }
    #[cfg(all(feature = "cuda", not(feature = "wgpu")))]
    {
        let device = Device::cuda(0usize);
        if burn_rope_pool::testing::device_works(&device) {
            return Some(device);
        }
        no_gpu("no CUDA device here")
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    no_gpu("this build has no GPU runtime")
}

/// The GPU device with a client and memory of its own, so that the memory a test measures there
/// is not moved by the tests running beside it: through wgpu, the adapter [`gpu_device`] opens
/// named by its kind (`DiscreteGpu(0)`, `Cpu`, …) rather than `DefaultDevice`, which CubeCL keys
/// as another device. CUDA has one device per GPU: there it is [`gpu_device`]'s.
pub fn own_gpu_device() -> Option<Device> {
    let device = gpu_device()?;
    #[cfg(feature = "wgpu")]
    {
        use cubecl::device::WgpuDeviceKind as Kind;
        // The adapters wgpu settled on, hardware first (as `DefaultDevice` prefers); where
        // none can be named, the shared device.
        let mut kinds: Vec<_> = cubecl::Device::enumerate_all()
            .into_iter()
            .filter_map(|device| match device {
                cubecl::Device::Wgpu(wgpu) => Some(wgpu.kind),
                _ => None,
            })
            .collect();
        kinds.sort_by_key(|kind| *kind == Kind::Cpu);
        let kind = match kinds.first() {
            Some(Kind::DiscreteGpu(i)) => DeviceKind::DiscreteGpu(*i),
            Some(Kind::IntegratedGpu(i)) => DeviceKind::IntegratedGpu(*i),
            Some(Kind::VirtualGpu(i)) => DeviceKind::VirtualGpu(*i),
            Some(Kind::Cpu) => DeviceKind::Cpu,
            _ => return Some(device),
        };
        Some(Device::wgpu(kind))
    }
    #[cfg(not(feature = "wgpu"))]
    Some(device)
}

/// Flex, then the GPU device ([`GPU`]) when there is one.
pub fn devices() -> Vec<(&'static str, Device)> {
    let mut devices = vec![("flex", Device::flex())];
    if let Some(device) = gpu_device() {
        devices.push((GPU, device));
    }
    devices
}

pub use burn_rope_pool::testing::Rng;

/// `values` as a float tensor of `dims`, stored in `dtype` on `device` (through f32).
pub fn float_tensor<const D: usize>(
    values: &[f64],
    dims: [usize; D],
    device: &Device,
    dtype: DType,
) -> Tensor<D> {
    let data: Vec<f32> = values.iter().map(|&x| x as f32).collect();
    Tensor::from_data(TensorData::new(data, dims), (device, dtype))
}

/// `x` rounded to `dtype` and back.
pub fn round_to(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F16 => half::f16::from_f64(x).to_f64(),
        DType::BF16 => half::bf16::from_f64(x).to_f64(),
        _ => x as f32 as f64,
    }
}

/// One call's host data.
#[derive(Clone, Debug)]
pub struct Case {
    pub config: RopePoolConfig,
    pub num_tokens: usize,
    pub pool_size: usize,
    pub q: Vec<f64>,
    pub k: Vec<f64>,
    pub v: Vec<f64>,
    pub positions: Vec<i64>,
    pub slots: Vec<i64>,
    pub k_pool: Vec<f64>,
    pub v_pool: Vec<f64>,
}

impl Case {
    /// A random case: random non-zero values, distinct valid slots mixed with negative ones and
    /// ones past the pool, positions below `max_position`.
    pub fn random(
        config: RopePoolConfig,
        num_tokens: usize,
        pool_size: usize,
        max_position: u64,
        seed: u64,
    ) -> Self {
        let mut rng = Rng::new(seed);
        let (hq, hkv, d) = (config.num_qo_heads, config.num_kv_heads, config.head_dim);
        let mut free: Vec<i64> = (0..pool_size as i64).collect();
        let slots = (0..num_tokens)
            .map(|_| match rng.below(8) {
                0 => -1 - rng.below(5) as i64,
                1 => pool_size as i64 + rng.below(3) as i64,
                _ if !free.is_empty() => free.swap_remove(rng.below(free.len() as u64) as usize),
                _ => -1,
            })
            .collect();
        Self {
            num_tokens,
            pool_size,
            q: rng.values(num_tokens * hq * d),
            k: rng.values(num_tokens * hkv * d),
            v: rng.values(num_tokens * hkv * d),
            // M-RoPE: three rows of positions, one after the other.
            positions: (0..num_tokens * if config.mrope.is_some() { 3 } else { 1 })
                .map(|_| rng.below(max_position) as i64)
                .collect(),
            slots,
            k_pool: rng.values(pool_size * hkv * d),
            v_pool: rng.values(pool_size * hkv * d),
            config,
        }
    }

    /// The case with every float rounded to `dtype` (what the device actually receives).
    pub fn rounded(&self, dtype: DType) -> Self {
        let r = |v: &Vec<f64>| v.iter().map(|&x| round_to(x, dtype)).collect();
        Self {
            q: r(&self.q),
            k: r(&self.k),
            v: r(&self.v),
            k_pool: r(&self.k_pool),
            v_pool: r(&self.v_pool),
            ..self.clone()
        }
    }

    pub fn reference(&self) -> ReferenceOutput {
        rope_pool_reference(
            &self.config,
            [&self.q, &self.k, &self.v],
            &self.positions,
            &self.slots,
            [&self.k_pool, &self.v_pool],
        )
    }

    pub fn float(
        &self,
        values: &[f64],
        dims: [usize; 3],
        device: &Device,
        dtype: DType,
    ) -> Tensor<3> {
        let values: Vec<f32> = values.iter().map(|&x| x as f32).collect();
        Tensor::from_data(TensorData::new(values, dims), (device, dtype))
    }

    pub fn int(&self, values: &[i64], device: &Device) -> Tensor<1, Int> {
        Tensor::from_data(TensorData::new(values.to_vec(), [values.len()]), device)
    }

    pub fn q_dims(&self) -> [usize; 3] {
        [
            self.num_tokens,
            self.config.num_qo_heads,
            self.config.head_dim,
        ]
    }
    pub fn kv_dims(&self) -> [usize; 3] {
        [
            self.num_tokens,
            self.config.num_kv_heads,
            self.config.head_dim,
        ]
    }
    pub fn pool_dims(&self) -> [usize; 3] {
        [
            self.pool_size,
            self.config.num_kv_heads,
            self.config.head_dim,
        ]
    }

    /// The seven input tensors on `device`.
    pub fn tensors(&self, device: &Device, dtype: DType) -> Inputs {
        Inputs {
            q: self.float(&self.q, self.q_dims(), device, dtype),
            k: self.float(&self.k, self.kv_dims(), device, dtype),
            v: self.float(&self.v, self.kv_dims(), device, dtype),
            positions: self.int(&self.positions, device),
            slots: self.int(&self.slots, device),
            k_pool: self.float(&self.k_pool, self.pool_dims(), device, dtype),
            v_pool: self.float(&self.v_pool, self.pool_dims(), device, dtype),
        }
    }

    /// Runs the op on `device` after poisoning the device's free memory with NaN, so an output
    /// element the kernel fails to write shows up as NaN.
    pub fn run(&self, device: &Device, dtype: DType) -> Result<ReferenceOutput, RopePoolError> {
        poison(device, dtype, &[self.q_dims(), self.kv_dims()]);
        let t = self.tensors(device, dtype);
        let out = t.call(&self.config)?;
        Ok(to_host(out))
    }
}

/// Inputs of one call, as device tensors (M-RoPE positions flat: `call` gives them their rows).
pub struct Inputs {
    pub q: Tensor<3>,
    pub k: Tensor<3>,
    pub v: Tensor<3>,
    pub positions: Tensor<1, Int>,
    pub slots: Tensor<1, Int>,
    pub k_pool: Tensor<3>,
    pub v_pool: Tensor<3>,
}

impl Inputs {
    /// The op's inputs (M-RoPE positions, stored as three rows one after the other, as
    /// `[3, T]`).
    pub fn into_inputs(self, config: &RopePoolConfig) -> RopePoolInputs {
        let positions = match config.mrope {
            Some(_) => {
                let len = self.positions.dims()[0];
                self.positions.reshape([3, len / 3]).into_dispatch()
            }
            None => self.positions.into_dispatch(),
        };
        RopePoolInputs {
            positions,
            ..RopePoolInputs::new(
                self.q,
                self.k,
                self.v,
                Tensor::<1, Int>::empty([0], &self.slots.device()),
                self.slots,
                self.k_pool,
                self.v_pool,
            )
        }
    }

    pub fn call(self, config: &RopePoolConfig) -> Result<RopePoolOutputs, RopePoolError> {
        rope_pool_fused(self.into_inputs(config), config)
    }
}

/// Fills buffers of the output sizes with NaN and frees them, so the allocator hands the
/// poisoned memory to the next outputs.
pub fn poison(device: &Device, dtype: DType, shapes: &[[usize; 3]]) {
    for shape in shapes {
        let _ = Tensor::<3>::full(*shape, f32::NAN, (device, dtype)).into_data();
    }
}

pub fn host(t: Tensor<3>) -> Vec<f64> {
    t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()
}

pub fn to_host(out: RopePoolOutputs) -> ReferenceOutput {
    ReferenceOutput {
        q_rot: host(out.q_rot),
        k_rot: host(out.k_rot),
        k_pool: host(out.k_pool.into_float()),
        v_pool: host(out.v_pool.into_float()),
    }
}

/// The unit in the last place of `x` in `dtype`.
pub fn ulp(x: f64, dtype: DType) -> f64 {
    let (mantissa, min_exp) = match dtype {
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        _ => (23, -126),
    };
    let exp = if x == 0.0 {
        min_exp
    } else {
        (x.abs().log2().floor() as i32).max(min_exp)
    };
    2f64.powi(exp - mantissa)
}

/// The four outputs of two runs side by side, with their names.
pub fn output_pairs<'a>(
    actual: &'a ReferenceOutput,
    expected: &'a ReferenceOutput,
) -> [(&'static str, &'a [f64], &'a [f64]); 4] {
    [
        ("q_rot", &actual.q_rot, &expected.q_rot),
        ("k_rot", &actual.k_rot, &expected.k_rot),
        ("k_pool", &actual.k_pool, &expected.k_pool),
        ("v_pool", &actual.v_pool, &expected.v_pool),
    ]
}

/// Asserts `actual` matches `expected` output by output: norm-relative error ≤ `rel`, and for
/// half types every element within one rounding of the storage type plus 4e-6 absolute: the f32
/// arithmetic's own error on pairs of magnitude ≤ 2√2 (angle ≤ 4e-7 rad, sin/cos and products a
/// few f32 roundings each), which dominates where the result is near zero.
pub fn assert_close(
    actual: &ReferenceOutput,
    expected: &ReferenceOutput,
    dtype: DType,
    rel: f64,
    what: &str,
) {
    for (name, a, e) in output_pairs(actual, expected) {
        assert_eq!(a.len(), e.len(), "{what}: {name} length");
        let err = burn_rope_pool::testing::norm_relative_error(a, e);
        assert!(
            err <= rel,
            "{what}: {name} norm-rel error {err:e} > {rel:e}"
        );
        if matches!(dtype, DType::F16 | DType::BF16) {
            for (i, (&x, &y)) in a.iter().zip(e.iter()).enumerate() {
                let bound = ulp(x.abs().max(y.abs()), dtype) * 1.01 + 4e-6;
                assert!(
                    (x - y).abs() <= bound,
                    "{what}: {name}[{i}] = {x} vs {y}: more than one {dtype:?} rounding off"
                );
            }
        }
    }
}

/// The dtypes `device` computes in (bf16 is refused by WGSL devices: tested separately).
pub fn dtypes(device: &Device) -> Vec<DType> {
    [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .filter(|d| device.supports_dtype(*d))
        .collect()
}

/// A count from the environment variable `name` (a longer run than CI's), or `default`.
pub fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// Bytes in use and reserved by this thread's stream on a CubeCL device (None elsewhere): the
/// other tests, on their own threads and streams, do not count.
pub fn memory(device: &Device) -> Option<(u64, u64)> {
    match device.as_dispatch().clone().inner() {
        burn::backend::DispatchDevice::Cube(cube) => {
            let usage = cube
                .client()
                .memory_report(cubecl::MemoryScope::CurrentStream)
                .usage();
            Some((usage.bytes_in_use, usage.bytes_reserved))
        }
        _ => None,
    }
}
