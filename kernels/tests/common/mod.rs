//! Shared by the kernel tests that launch on wgpu (each test crate uses a part).
#![allow(dead_code)]

use cubecl::Device;
use cubecl::client::Client;
use cubecl::device::WgpuDeviceKind;
use cubecl::prelude::TensorArg;
use cubecl::wgpu::WgpuDevice;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The environment variable that lets a run without a wgpu adapter pass: with
/// `ROPE_POOL_ALLOW_NO_GPU=1` the GPU cases are skipped and counted. Without it a missing adapter
/// fails them (with `CI=true` or not), so that a green run never hides kernels that did not run.
pub const ALLOW_NO_GPU: &str = "ROPE_POOL_ALLOW_NO_GPU";

/// How many GPU cases this test process skipped.
static SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// Prints, when the test process exits, how many GPU cases it skipped (the test harness
/// captures what the tests print; this line is not).
fn print_skip_summary_at_exit() {
    extern "C" fn summary() {
        let skipped = SKIPPED.load(Ordering::SeqCst);
        eprintln!(
            "\n{skipped} wgpu case(s) skipped in this run ({ALLOW_NO_GPU}=1): those kernels \
             did not run"
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

/// The GPU case `what` cannot run, for `reason`: a panic (the test fails), or with
/// [`ALLOW_NO_GPU`]`=1` `None`, the skip counted and said on stderr (`--nocapture`, or the output
/// of a test that fails) and the count printed again when the process exits.
pub fn no_gpu<T>(what: &str, reason: &str) -> Option<T> {
    let skipped = SKIPPED.fetch_add(1, Ordering::SeqCst) + 1;
    if std::env::var(ALLOW_NO_GPU).as_deref() != Ok("1") {
        panic!(
            "{what}: {reason}. GPU cases fail rather than pass unrun; set {ALLOW_NO_GPU}=1 to \
             skip them. {skipped} wgpu case(s) found no adapter in this process so far"
        );
    }
    print_skip_summary_at_exit();
    eprintln!(
        "{what} skipped ({ALLOW_NO_GPU}=1): {reason} [{skipped} wgpu case(s) skipped in this \
         process so far]"
    );
    None
}

/// The wgpu client of the default adapter, any adapter (Mesa's software Vulkan included), or
/// [`no_gpu`] without one.
pub fn any_client(what: &str) -> Option<Client> {
    match std::panic::catch_unwind(|| Device::Wgpu(WgpuDevice::default()).client()) {
        Ok(client) => Some(client),
        Err(_) => no_gpu(
            what,
            "no wgpu adapter (install mesa-vulkan-drivers for Mesa's software Vulkan)",
        ),
    }
}

/// The wgpu client to launch kernels on, or [`no_gpu`] without an adapter, and also where the
/// client compiles SPIR-V and wgpu finds no hardware adapter (a build that unifies burn's
/// `vulkan` feature into these tests, on Mesa's software Vulkan): lavapipe 22.3 segfaults
/// creating SPIR-V pipelines with workgroup memory, which no panic handler catches;
/// `scripts/test.sh` runs the WGSL build there.
pub fn client(what: &str) -> Option<Client> {
    let client = any_client(what)?;
    let hardware = Device::enumerate_all()
        .iter()
        .any(|device| matches!(device, Device::Wgpu(wgpu) if wgpu.kind != WgpuDeviceKind::Cpu));
    if client.name() == "wgpu<spirv>" && !hardware {
        return no_gpu(
            what,
            "SPIR-V on software Vulkan (lavapipe crashes on it; use the WGSL build)",
        );
    }
    Some(client)
}

/// A contiguous tensor argument of `dims` over a fresh buffer of 4-byte elements, for kernels
/// that are expanded and compiled but not run.
pub fn dummy_tensor(client: &Client, dims: &[usize]) -> TensorArg {
    let handle = client.empty(dims.iter().product::<usize>().max(1) * 4);
    let mut strides = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    // Safety: the buffer holds every element of `dims` at those strides.
    unsafe { TensorArg::from_raw_parts(handle, strides.into(), dims.to_vec().into()) }
}

/// `client`'s device properties with f16 16 × 16 × 16 tensor-core tiles (f32 accumulation) added,
/// for compiling tensor-core kernels to CUDA C++ where no device has them: CubeCL's C++ compiler
/// checks a kernel's fragments against these.
pub fn properties_with_f16_tiles(client: &Client) -> std::sync::Arc<cubecl::ir::DeviceProperties> {
    use cubecl::features::MmaConfig;
    use cubecl::ir::{ElemType, FloatKind};
    let mut properties = client.properties().clone();
    properties.features.matmul.cmma.insert(MmaConfig {
        a_type: ElemType::Float(FloatKind::F16),
        b_type: ElemType::Float(FloatKind::F16),
        cd_type: ElemType::Float(FloatKind::F32),
        m: 16,
        n: 16,
        k: 16,
    });
    std::sync::Arc::new(properties)
}

/// The SPIR-V compiler's options of a Vulkan device like the H200's (SPIR-V 1.6, explicit
/// shared-memory layouts, float8), for compiling kernels to SPIR-V where no such device is.
pub fn vulkan_options() -> cubecl::WgpuCompilationOptions {
    cubecl::WgpuCompilationOptions {
        supports_u64: true,
        supports_vulkan_compiler: true,
        supports_msl_compiler: false,
        vulkan: cubecl::VulkanCompilationOptions {
            supports_explicit_smem: true,
            supports_float8: true,
            max_spirv_version: (1, 6),
            max_vector_size: 4,
            ..Default::default()
        },
    }
}

/// `kernel` (expanded against [`properties_with_f16_tiles`]) compiles to CUDA C++ with a
/// tensor-core product (`cmma` becomes `wmma`) and to SPIR-V for Vulkan's cooperative matrices,
/// so that an expansion or lowering error of a tensor-core kernel shows without a GPU; `what`
/// names it in the failure.
pub fn assert_tensor_core_kernel_compiles(kernel: impl cubecl::prelude::CubeKernel, what: &str) {
    use cubecl::Compiler as _;
    let source = cuda_source(&kernel, what);
    assert!(
        source.contains("wmma::mma_sync"),
        "{what}: no tensor-core product in\n{source}"
    );
    let spirv = cubecl_spirv::SpirvCompiler
        .compile(kernel.define(), &vulkan_options())
        .unwrap_or_else(|e| panic!("{what} compiles to SPIR-V: {e:?}"));
    assert!(
        !spirv.assembled_module.is_empty(),
        "{what}: an empty SPIR-V module"
    );
}

/// `client`'s device properties listing f16 `mma.sync` 16 × 8 × 16 (f32 accumulation), and CUDA's
/// manual-`mma` register layout as the target: what a warp-level tensor-core kernel is expanded
/// against to compile it to CUDA C++ where no such device is.
pub fn warp_mma_properties(
    client: &Client,
) -> (
    std::sync::Arc<cubecl::ir::DeviceProperties>,
    std::sync::Arc<cubecl::ir::TargetProperties>,
) {
    use cubecl::ir::{ElemType, FloatKind};
    let f16 = ElemType::Float(FloatKind::F16);
    let mut properties = client.properties().clone();
    properties
        .features
        .matmul
        .mma
        .insert(cubecl::features::MmaConfig {
            a_type: f16,
            b_type: f16,
            cd_type: ElemType::Float(FloatKind::F32),
            m: 16,
            n: 8,
            k: 16,
        });
    let target = cubecl::ir::TargetProperties {
        mma: cubecl::ir::MmaProperties {
            register_size_bits: 32,
            const_plane_size: 32,
            register_layout_a: cubecl::cmma::MatrixLayout::RowMajor,
            register_layout_b: cubecl::cmma::MatrixLayout::ColMajor,
            register_layout_acc: cubecl::cmma::MatrixLayout::RowMajor,
            register_duplication_a: 1,
            register_duplication_b: 1,
            register_duplication_acc: 1,
            contiguous_elements: cubecl::ir::ContiguousElements::new(
                cubecl_cpp::cuda::mma::manual::contiguous_elements_cuda,
            ),
        },
    };
    (std::sync::Arc::new(properties), std::sync::Arc::new(target))
}

/// `kernel` (expanded against [`warp_mma_properties`]) compiles to CUDA C++ with a `mma.sync`;
/// `what` names it in the failure (no CUDA compiler runs here).
pub fn assert_warp_mma_kernel_compiles(kernel: impl cubecl::prelude::CubeKernel, what: &str) {
    let source = cuda_source(&kernel, what);
    assert!(
        source.contains("mma.sync"),
        "{what}: no mma.sync in\n{source}"
    );
}

/// `kernel` translated to CUDA C++ (no CUDA compiler runs here); `what` names it in the failure.
fn cuda_source(kernel: &impl cubecl::prelude::CubeKernel, what: &str) -> String {
    use cubecl::Compiler as _;
    use cubecl_cpp::shared::{CompilationOptions, CppCompiler};
    CppCompiler::<cubecl_cpp::target::Cuda>::default()
        .compile(kernel.define(), &CompilationOptions::default())
        .unwrap_or_else(|e| panic!("{what} compiles to CUDA C++: {e:?}"))
        .to_string()
}
