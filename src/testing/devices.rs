//! Picking a device by name, as the examples and benchmarks take it on the command line.

use burn::tensor::{Device, Tensor};

/// Whether `device` can run a tiny computation (a GPU device without a usable adapter panics on
/// first use; this turns that into `false`).
pub fn device_works(device: &Device) -> bool {
    let probe = device.clone();
    std::panic::catch_unwind(move || {
        Tensor::<1>::from_floats([1.0, 2.0], &probe)
            .sum()
            .into_scalar::<f32>()
            == 3.0
    })
    .unwrap_or(false)
}

/// Why wgpu must not be opened here, if it must not: this build compiles SPIR-V (the `vulkan`
/// feature, on by default) and wgpu finds no hardware GPU, only software adapters. Mesa 22.3's
/// lavapipe segfaults inside `vkCreateComputePipelines` on SPIR-V kernels with workgroup memory
/// and barriers (Burn's `sum`, this crate's RMSNorm): a crash no panic handler catches. The WGSL
/// build (`--no-default-features --features wgpu,fusion,flex,autodiff`) runs there. Looked up once.
pub fn wgpu_refusal() -> Option<&'static str> {
    #[cfg(feature = "vulkan")]
    {
        use cubecl::device::WgpuDeviceKind;
        static HARDWARE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let hardware = *HARDWARE.get_or_init(|| {
            cubecl::Device::enumerate_all().iter().any(|device| {
                matches!(device, cubecl::Device::Wgpu(wgpu) if wgpu.kind != WgpuDeviceKind::Cpu)
            })
        });
        if !hardware {
            return Some(
                "wgpu finds no hardware GPU here, and this build compiles SPIR-V, which Mesa's \
                 software Vulkan (lavapipe 22.3) crashes on: use `--device flex`, or the WGSL \
                 build (`--no-default-features --features wgpu,fusion,flex,autodiff`)",
            );
        }
    }
    None
}

/// Whether `device` is a wgpu device.
fn is_wgpu(device: &Device) -> bool {
    #[cfg(feature = "wgpu")]
    if let burn::backend::DispatchDevice::Cube(cubecl::Device::Wgpu(_)) =
        device.as_dispatch().clone().inner()
    {
        return true;
    }
    let _ = device;
    false
}

/// The device names this build can open: `flex`, `wgpu`, `vulkan`, `metal`, `cuda`, `default`.
/// `default` is burn's default device, or Flex when that one has no usable adapter or
/// [`wgpu_refusal`] applies (the caller sees which in the device's `Debug` form); `wgpu` and
/// `vulkan` are refused with [`wgpu_refusal`]'s reason where it applies. `cuda:N`, `wgpu:N` and
/// `vulkan:N` name CUDA's device N or wgpu's N-th discrete GPU (tensor-parallel runs; `flex:N`
/// is Flex). An index past the machine's GPUs is refused where a device is opened.
pub fn device_by_name(name: &str) -> Result<Device, String> {
    #[cfg(feature = "wgpu")]
    use burn::tensor::DeviceKind;
    // `NAME:INDEX`: CUDA's device INDEX, wgpu's (Vulkan's) INDEX-th discrete GPU.
    if let Some((runtime, index)) = name.split_once(':') {
        let index: usize = index
            .parse()
            .map_err(|_| format!("device `{name}`: `{index}` is not a GPU index"))?;
        return match runtime {
            // Flex is one CPU device: every index names it (shards side by side in memory).
            #[cfg(feature = "flex")]
            "flex" => Ok(Device::flex()),
            #[cfg(feature = "cuda")]
            "cuda" => Ok(Device::cuda(index)),
            #[cfg(feature = "wgpu")]
            "wgpu" | "vulkan" if let Some(reason) = wgpu_refusal() => {
                Err(format!("device `{name}`: {reason}"))
            }
            #[cfg(feature = "wgpu")]
            "wgpu" => Ok(Device::wgpu(DeviceKind::DiscreteGpu(index))),
            #[cfg(feature = "vulkan")]
            "vulkan" => Ok(Device::vulkan(DeviceKind::DiscreteGpu(index))),
            _ => Err(format!(
                "device `{name}`: no GPU {index} of `{runtime}` in this build (cuda, wgpu or vulkan, with its cargo feature, on a hardware GPU)"
            )),
        };
    }
    match name {
        "default" => {
            let device = Device::default();
            // A refused wgpu device is not even probed (the probe is what would crash).
            if let (true, Some(_reason)) = (is_wgpu(&device), wgpu_refusal()) {
                #[cfg(feature = "flex")]
                return Ok(Device::flex());
                #[cfg(not(feature = "flex"))]
                return Err(format!("device `default`: {_reason}"));
            }
            #[cfg(feature = "flex")]
            if !device_works(&device) {
                return Ok(Device::flex());
            }
            Ok(device)
        }
        #[cfg(feature = "flex")]
        "flex" => Ok(Device::flex()),
        #[cfg(feature = "wgpu")]
        "wgpu" | "vulkan" if wgpu_refusal().is_some() => Err(format!(
            "device `{name}`: {}",
            wgpu_refusal().unwrap_or_default()
        )),
        #[cfg(feature = "wgpu")]
        "wgpu" => Ok(Device::wgpu(DeviceKind::DefaultDevice)),
        #[cfg(feature = "vulkan")]
        "vulkan" => Ok(Device::vulkan(DeviceKind::DefaultDevice)),
        #[cfg(feature = "metal")]
        "metal" => Ok(Device::metal(DeviceKind::DefaultDevice)),
        #[cfg(feature = "cuda")]
        "cuda" => Ok(Device::cuda(0usize)),
        other => Err(format!(
            "device `{other}` is not available in this build (enable its cargo feature)"
        )),
    }
}

/// The float dtype named `f32`, `f16` or `bf16` (as the examples take it on the command line).
pub fn dtype_by_name(name: &str) -> Result<burn::tensor::DType, String> {
    use burn::tensor::DType;
    match name {
        "f32" => Ok(DType::F32),
        "f16" => Ok(DType::F16),
        "bf16" => Ok(DType::BF16),
        other => Err(format!("unknown dtype `{other}` (f32, f16 or bf16)")),
    }
}

/// The ranks of a tensor-parallel run named on a command line: `NAME:0` … `NAME:N-1`
/// ([`device_by_name`]) and the collective that sums over them, Burn's all-reduce on `cuda`,
/// [`InProcess`](crate::model::InProcess) elsewhere.
pub fn ranks_by_name(
    name: &str,
    ranks: usize,
) -> Result<(Vec<Device>, Box<dyn crate::model::Collective>), String> {
    let devices = (0..ranks)
        .map(|i| device_by_name(&format!("{name}:{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let collective: Box<dyn crate::model::Collective> = match name {
        "cuda" => {
            Box::new(crate::model::BurnAllReduce::new(devices.clone()).map_err(|e| e.to_string())?)
        }
        _ => Box::new(crate::model::InProcess),
    };
    Ok((devices, collective))
}
