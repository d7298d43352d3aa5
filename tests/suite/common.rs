//! Test support: the devices under test, random cases, poisoning, and scoring against the f64
//! reference.

#[cfg(feature = "wgpu")]
use burn::tensor::DeviceKind;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn_rope_pool::testing::reference::{ReferenceOutput, rope_pool_reference};
use burn_rope_pool::{
    RopePoolConfig, RopePoolError, RopePoolInputs, RopePoolOutputs, rope_pool_fused,
};

/// The GPU runtime under test: wgpu in builds with it (CI: Mesa's software Vulkan), else CUDA
/// (a `--no-default-features --features cuda,flex,autodiff` build, run on an NVIDIA GPU).
#[cfg(feature = "wgpu")]
pub const GPU: &str = "wgpu";
#[cfg(not(feature = "wgpu"))]
pub const GPU: &str = "cuda";

/// The environment variable that lets a run without a GPU device pass: `ROPE_POOL_ALLOW_NO_GPU=1`
/// runs the Flex cases alone and counts the GPU cases it skips. Without it a missing GPU device
/// fails the tests that would have run on it (with `CI=true` or not), so that a green run never
/// hides GPU cases that did not run.
pub const ALLOW_NO_GPU: &str = "ROPE_POOL_ALLOW_NO_GPU";

/// How many GPU cases this test process has asked for and not had (each [`gpu_device`] call
/// without a device: one `devices()` loop, or one GPU-only test).
static GPU_CASES_SKIPPED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether [`ALLOW_NO_GPU`] is set to `1`.
fn no_gpu_allowed() -> bool {
    std::env::var(ALLOW_NO_GPU).is_ok_and(|v| v == "1")
}

/// Prints, when the test process exits, how many GPU cases it skipped (the test harness
/// captures what the tests print; this line is not).
fn print_skip_summary_at_exit() {
    extern "C" fn summary() {
        let skipped = GPU_CASES_SKIPPED.load(std::sync::atomic::Ordering::SeqCst);
        eprintln!(
            "\n{skipped} {GPU} case(s) skipped in this run ({ALLOW_NO_GPU}=1, no {GPU} device): \
             they did not run, only their Flex twins did"
        );
    }
    unsafe extern "C" {
        fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: `summary` is a plain function that only reads an atomic and prints.
    ONCE.call_once(|| unsafe {
        atexit(summary);
    });
}

/// No GPU device to test on, for `reason`: the calling test fails, unless [`ALLOW_NO_GPU`] is
/// `1`; then the GPU case is skipped, counted and said on stderr (`--nocapture`, or the output
/// of a test that fails), and the process prints the count when it exits.
fn no_gpu(reason: &str) -> Option<Device> {
    let skipped = GPU_CASES_SKIPPED.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    if !no_gpu_allowed() {
        panic!(
            "no {GPU} device to test on: {reason}. GPU cases fail rather than pass unrun; set \
             {ALLOW_NO_GPU}=1 to skip them (and run their Flex twins only). {skipped} {GPU} \
             case(s) found no device in this process so far"
        );
    }
    print_skip_summary_at_exit();
    eprintln!(
        "{GPU} case skipped ({ALLOW_NO_GPU}=1): {reason} [{skipped} {GPU} case(s) skipped in \
         this process so far]"
    );
    None
}

/// The GPU device of this build, not yet probed.
fn gpu() -> Option<Device> {
    #[cfg(feature = "wgpu")]
    {
        Some(Device::wgpu(DeviceKind::DefaultDevice))
    }
    #[cfg(all(feature = "cuda", not(feature = "wgpu")))]
    {
        Some(Device::cuda(0usize))
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    {
        None
    }
}

/// Why this machine opens no GPU device ([`GPU`]), looked up once per process (a missing
/// adapter panics inside the probe; once is enough to know).
fn gpu_missing() -> Option<&'static str> {
    static MISSING: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    MISSING
        .get_or_init(|| {
            #[cfg(feature = "wgpu")]
            if let Some(reason) = burn_rope_pool::testing::wgpu_refusal() {
                return Some(reason.to_string());
            }
            match gpu() {
                None => Some("this build has no GPU runtime".into()),
                Some(device) if burn_rope_pool::testing::device_works(&device) => None,
                Some(_) if GPU == "wgpu" => Some(
                    "no wgpu adapter here (install mesa-vulkan-drivers for Mesa's software \
                     Vulkan)"
                        .into(),
                ),
                Some(_) => Some(format!("no {GPU} device here")),
            }
        })
        .as_deref()
}

/// The GPU device under test ([`GPU`]), when this machine opens one. Where it does not, the
/// calling test fails, or with [`ALLOW_NO_GPU`]`=1` gets `None` (the skip counted and printed).
/// Any adapter counts, Mesa's software Vulkan (lavapipe) included, except where
/// [`burn_rope_pool::testing::wgpu_refusal`] refuses it (SPIR-V on software Vulkan).
pub fn gpu_device() -> Option<Device> {
    match gpu_missing() {
        Some(reason) => no_gpu(reason),
        None => gpu(),
    }
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

/// Flex, then the GPU device ([`GPU`]): without one the calling test fails, unless
/// [`ALLOW_NO_GPU`]`=1` (then Flex alone, the skipped GPU case counted; see [`gpu_device`]).
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

/// fp8 pool words (four e4m3 codes each) of a `[rows, heads, head_dim]` pool, as the u32
/// tensor `[rows, heads, head_dim / 4]` on `device`.
pub fn words_tensor(
    words: &[u32],
    [rows, heads, head_dim]: [usize; 3],
    device: &Device,
) -> Tensor<3, Int> {
    let data = TensorData::new(words.to_vec(), [rows, heads, head_dim / 4]);
    Tensor::from_data(data, (device, DType::U32))
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
