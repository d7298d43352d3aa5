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

/// The device names this build can open: `flex`, `wgpu`, `vulkan`, `metal`, `cuda`, `default`.
/// `default` is burn's default device, or Flex when that one has no usable adapter (the caller
/// sees which in the device's `Debug` form).
pub fn device_by_name(name: &str) -> Result<Device, String> {
    #[cfg(feature = "wgpu")]
    use burn::tensor::DeviceKind;
    match name {
        "default" => {
            let device = Device::default();
            #[cfg(feature = "flex")]
            if !device_works(&device) {
                return Ok(Device::flex());
            }
            Ok(device)
        }
        #[cfg(feature = "flex")]
        "flex" => Ok(Device::flex()),
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
