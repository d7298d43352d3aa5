//! Shared by the kernel tests that launch on wgpu.

use cubecl::Device;
use cubecl::client::Client;
use cubecl::device::WgpuDeviceKind;
use cubecl::wgpu::WgpuDevice;

/// The wgpu client, or `None` (the test named `what` skipped) without an adapter; with
/// `CI=true` a missing adapter fails. Also `None` where the client compiles SPIR-V and wgpu finds
/// no hardware adapter (a build that unifies burn's `vulkan` feature into these tests, on Mesa's
/// software Vulkan): lavapipe 22.3 segfaults creating SPIR-V pipelines with workgroup memory,
/// which no panic handler catches; `scripts/test.sh` runs the WGSL build there.
pub fn client(what: &str) -> Option<Client> {
    let skip = |reason: &str| {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true but {reason}");
        }
        eprintln!("{reason}: {what} skipped");
        None
    };
    let client = match std::panic::catch_unwind(|| Device::Wgpu(WgpuDevice::default()).client()) {
        Ok(client) => client,
        Err(_) => {
            return skip("no wgpu adapter (install mesa-vulkan-drivers for software Vulkan)");
        }
    };
    let hardware = Device::enumerate_all()
        .iter()
        .any(|device| matches!(device, Device::Wgpu(wgpu) if wgpu.kind != WgpuDeviceKind::Cpu));
    if client.name() == "wgpu<spirv>" && !hardware {
        return skip("SPIR-V on software Vulkan (lavapipe crashes on it; use the WGSL build)");
    }
    Some(client)
}
