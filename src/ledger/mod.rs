//! The device ledger: where all of a device's memory goes, the app's own textures and
//! buffers included, in one report.
//!
//! vramkit's statistics see what its arenas hold; the driver's budget sees everything the
//! process holds on the device. The ledger puts the two side by side and says which part
//! is which:
//!
//! | line | from |
//! |---|---|
//! | **app**, by owner | what the host registered ([`Ledger::track_texture`], [`Ledger::create_texture`], ...): exact logical bytes of every mip, layer and sample ([`texture_bytes`]) |
//! | **vramkit**, by part | its arenas (with what each label holds), staging rings, virtual-texture caches and tile staging, the host tier |
//! | **wgpu internal** | wgpu's allocator report where the backend gives one (Vulkan, DX12): free space in its memory blocks, and the buffers wgpu made for itself |
//! | **driver** | [`Gpu::driver_memory`]: `VK_EXT_memory_budget`, DXGI, Metal, or nothing (the browser, lavapipe) |
//! | **untracked** | what the driver counts that no line explains: resources nobody registered, alignment, the driver's own allocations |
//!
//! Where wgpu's allocator report exists, [`LedgerReport::wgpu`] also lists the resources
//! in it by label that are neither wgpu's nor vramkit's: the app's, registered or not.
//!
//! # Registering the app's resources
//! A registered resource comes back wrapped in a [`Tracked`], which derefs to it: its
//! bytes stay on the owner's line while the `Tracked` lives and leave it exactly when it
//! drops. A clone of the wgpu handle kept elsewhere (a bind group holds its buffers)
//! keeps the memory but not the line; the ledger counts what the app says it holds.
//! Taking an [`Owner`] once ([`Ledger::owner`]) and tracking through it costs two atomic
//! adds per resource; by name, one hash lookup more.
//!
//! # The growth watch
//! [`Ledger::end_frame`], called once a frame (or step), compares each owner with the
//! frame before: an owner that grew in [`GROWTH_FRAMES`] frames with nothing dropped in
//! between (a texture made in a loop and forgotten) is named in a `log` warning and in
//! [`LedgerReport::growing`] until it drops something or stays quiet for
//! [`QUIET_FRAMES`] frames.
//!
//! ```no_run
//! let gpu = vramkit::Gpu::headless()?;
//! let ledger = gpu.ledger();
//! let scene = ledger.owner("scene");
//! let albedo = scene.create_texture(&wgpu::TextureDescriptor {
//!     label: Some("albedo"),
//!     size: wgpu::Extent3d { width: 1024, height: 1024, depth_or_array_layers: 1 },
//!     mip_level_count: 11,
//!     sample_count: 1,
//!     dimension: wgpu::TextureDimension::D2,
//!     format: wgpu::TextureFormat::Bc7RgbaUnorm,
//!     usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
//!     view_formats: &[],
//! })?;
//! let _view = albedo.create_view(&Default::default());
//! ledger.end_frame();
//! println!("{}", ledger.report());
//! # Ok::<(), vramkit::Error>(())
//! ```

mod footprint;
mod growth;
mod report;

pub use footprint::{bytes_of, texture_bytes};
pub use growth::{Growth, GROWTH_FRAMES, QUIET_FRAMES};
pub use report::{LedgerLine, LedgerReport, NamedBytes, WgpuMemory};

pub use crate::gpu::accounts::{MemoryKind, Part};

use std::sync::Arc;

use crate::gpu::accounts::{Account, Charge};
use crate::{Gpu, Result};

/// A device's ledger ([`Gpu::ledger`]): a cheap handle; every handle of one device reads
/// and writes the same book.
#[derive(Clone, Debug)]
pub struct Ledger {
    gpu: Gpu,
}

impl Gpu {
    /// This device's ledger (see the [`ledger`](crate::ledger) module).
    pub fn ledger(&self) -> Ledger {
        Ledger { gpu: self.clone() }
    }
}

impl Ledger {
    /// The app's owner `name`: a line of its own, to track resources through.
    pub fn owner(&self, name: &str) -> Owner {
        Owner {
            gpu: self.gpu.clone(),
            account: self
                .gpu
                .accounts()
                .account(Part::App, MemoryKind::Device, name),
        }
    }

    /// Registers `texture` under `owner` ([`Owner::track_texture`]).
    pub fn track_texture(
        &self,
        texture: wgpu::Texture,
        owner: &str,
    ) -> Result<Tracked<wgpu::Texture>> {
        self.owner(owner).track_texture(texture)
    }

    /// Registers `buffer` under `owner` ([`Owner::track_buffer`]).
    pub fn track_buffer(&self, buffer: wgpu::Buffer, owner: &str) -> Tracked<wgpu::Buffer> {
        self.owner(owner).track_buffer(buffer)
    }

    /// Creates a texture on this device, registered under `owner`
    /// ([`Owner::create_texture`]).
    pub fn create_texture(
        &self,
        desc: &wgpu::TextureDescriptor,
        owner: &str,
    ) -> Result<Tracked<wgpu::Texture>> {
        self.owner(owner).create_texture(desc)
    }

    /// Creates a buffer on this device, registered under `owner`
    /// ([`Owner::create_buffer`]).
    pub fn create_buffer(
        &self,
        desc: &wgpu::BufferDescriptor,
        owner: &str,
    ) -> Result<Tracked<wgpu::Buffer>> {
        self.owner(owner).create_buffer(desc)
    }

    /// The report now: every line, wgpu's allocator where the backend has one, the
    /// driver's reading where there is one, and the owners the growth watch names.
    /// Reads each source with no lock of vramkit held; costs one walk over wgpu's
    /// allocations where it reports them.
    pub fn report(&self) -> LedgerReport {
        report::build(&self.gpu)
    }

    /// Ends a frame for the growth watch (module docs): returns the owners growing now,
    /// and logs a warning for each one the first frame it is named.
    pub fn end_frame(&self) -> Vec<Growth> {
        growth::end_frame(&self.gpu)
    }
}

/// One of the app's owners: a line of the ledger. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Owner {
    gpu: Gpu,
    account: Arc<Account>,
}

impl Owner {
    /// Registers `texture` (made on this device): its bytes ([`bytes_of`]) stay on this
    /// owner's line while the returned [`Tracked`] lives. An error, with nothing
    /// registered, for a format whose size the ledger does not know.
    pub fn track_texture(&self, texture: wgpu::Texture) -> Result<Tracked<wgpu::Texture>> {
        let bytes = bytes_of(&texture)?;
        Ok(Tracked {
            charge: self.account.charge(bytes),
            resource: texture,
        })
    }

    /// Registers `buffer` (made on this device): its size stays on this owner's line
    /// while the returned [`Tracked`] lives.
    pub fn track_buffer(&self, buffer: wgpu::Buffer) -> Tracked<wgpu::Buffer> {
        Tracked {
            charge: self.account.charge(buffer.size()),
            resource: buffer,
        }
    }

    /// Bytes the app holds some other way (a surface's swap chain, an external import),
    /// on this owner's line while the returned charge lives.
    pub fn charge_bytes(&self, bytes: u64) -> Tracked<()> {
        Tracked {
            charge: self.account.charge(bytes),
            resource: (),
        }
    }

    /// Creates a texture on this device inside an error scope (a descriptor wgpu refuses
    /// is an error, not a panic) and registers it.
    pub fn create_texture(&self, desc: &wgpu::TextureDescriptor) -> Result<Tracked<wgpu::Texture>> {
        // The size first: a format the ledger cannot count creates nothing.
        let bytes = texture_bytes(
            desc.size,
            desc.mip_level_count,
            desc.sample_count,
            desc.dimension,
            desc.format,
        )?;
        let texture = self.gpu.scoped("creating a tracked texture", || {
            self.gpu.device().create_texture(desc)
        })?;
        Ok(Tracked {
            charge: self.account.charge(bytes),
            resource: texture,
        })
    }

    /// Creates a buffer on this device inside an error scope and registers it.
    pub fn create_buffer(&self, desc: &wgpu::BufferDescriptor) -> Result<Tracked<wgpu::Buffer>> {
        let buffer = self.gpu.scoped("creating a tracked buffer", || {
            self.gpu.device().create_buffer(desc)
        })?;
        Ok(self.track_buffer(buffer))
    }

    /// The owner's name.
    pub fn name(&self) -> String {
        self.account_name().to_string()
    }

    fn account_name(&self) -> &str {
        // (The account's name lives in the book; a zero charge is not needed to read it.)
        self.account.name()
    }
}

/// A registered resource: derefs to it; its bytes leave its owner's line when this drops
/// (or [`into_inner`](Self::into_inner) takes the resource out).
#[derive(Debug)]
pub struct Tracked<T> {
    resource: T,
    charge: Charge,
}

impl<T> Tracked<T> {
    /// The bytes on the owner's line.
    pub fn bytes(&self) -> u64 {
        self.charge.bytes()
    }

    /// The owner's name.
    pub fn owner(&self) -> &str {
        self.charge.name()
    }

    /// The resource, no longer on the ledger.
    pub fn into_inner(self) -> T {
        self.resource
    }
}

impl<T> std::ops::Deref for Tracked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.resource
    }
}
