//! The device's accounts: who holds how many bytes of it, as the holders declare them.
//! The raw book under the device ledger (`crate::ledger`), which turns it into a report.
//!
//! # How it works
//! An [`Account`] is a named line of one [`Part`] (the app's owner "scene", vramkit's
//! "upload staging") with atomic counters: bytes held, resources held, resources created
//! and dropped since the device opened. A holder takes a [`Charge`] on an account for
//! each resource it creates; the charge adds its bytes and gives them back when it drops,
//! wherever and on whatever thread that happens (a charge may drop inside a wgpu
//! callback). Holders whose bytes live in structures of their own (an arena's blocks and
//! labels) register a [`MemorySource`] instead, read when a report is made.
//!
//! # Promises
//! - **A charge never blocks and never locks.** Taking one on an account handle, and
//!   dropping it, are atomic adds; only finding an account by name takes this book's lock,
//!   which ranks above every other lock of vramkit (nothing is taken under it, nothing
//!   foreign runs under it), so a charge may be taken anywhere.
//! - **Sources are read with no lock of ours held**: the list is copied out first, so a
//!   source may take its own locks.
//! - **Exact.** What a line shows is the sum of the live charges on it; a report taken
//!   while another thread creates or drops resources sees each charge whole or not at all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use rustc_hash::FxHashMap;

use crate::sync::rank::{self as lock_rank, Mutex};

/// Which part of the ledger a line belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    /// What the application created itself and registered (by owner).
    App,
    /// vramkit's own memory: arenas, staging rings, virtual textures, the host tier.
    Vramkit,
}

/// Where a line's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryKind {
    /// Memory of the device (what the driver's budget counts on a discrete GPU).
    Device,
    /// Host memory the device reads or writes (staging rings, the host tier): counted by
    /// the system, not by the device's budget.
    Host,
}

/// One named line of the book; shared by every charge on it.
#[derive(Debug)]
pub struct Account {
    part: Part,
    kind: MemoryKind,
    name: Arc<str>,
    bytes: AtomicU64,
    held: AtomicU64,
    created: AtomicU64,
    dropped: AtomicU64,
}

/// An account's counters at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountReading {
    /// App or vramkit.
    pub part: Part,
    /// Device or host memory.
    pub kind: MemoryKind,
    /// The owner's or the component's name.
    pub name: String,
    /// Bytes held now.
    pub bytes: u64,
    /// Resources held now.
    pub held: u64,
    /// Resources charged since the device opened.
    pub created: u64,
    /// Resources released since the device opened.
    pub dropped: u64,
}

impl Account {
    /// Charges `bytes` to this account until the returned charge drops.
    pub(crate) fn charge(self: &Arc<Self>, bytes: u64) -> Charge {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.held.fetch_add(1, Ordering::Relaxed);
        self.created.fetch_add(1, Ordering::Relaxed);
        Charge {
            account: self.clone(),
            bytes,
        }
    }

    /// The account's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn reading(&self) -> AccountReading {
        AccountReading {
            part: self.part,
            kind: self.kind,
            name: self.name.to_string(),
            bytes: self.bytes.load(Ordering::Relaxed),
            held: self.held.load(Ordering::Relaxed),
            created: self.created.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

/// Bytes of one resource, charged to an account while this lives.
#[derive(Debug)]
pub(crate) struct Charge {
    account: Arc<Account>,
    bytes: u64,
}

impl Charge {
    /// The bytes charged.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The account's name.
    pub(crate) fn name(&self) -> &str {
        &self.account.name
    }

    /// Changes the bytes charged (a ring that grew or shrank in place).
    pub(crate) fn set(&mut self, bytes: u64) {
        if bytes >= self.bytes {
            self.account
                .bytes
                .fetch_add(bytes - self.bytes, Ordering::Relaxed);
        } else {
            self.account
                .bytes
                .fetch_sub(self.bytes - bytes, Ordering::Relaxed);
        }
        self.bytes = bytes;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.account.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
        self.account.held.fetch_sub(1, Ordering::Relaxed);
        self.account.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// One line a [`MemorySource`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceLine {
    /// The component's name (`arena 'default'`).
    pub name: String,
    /// Device or host memory.
    pub kind: MemoryKind,
    /// Bytes the component holds.
    pub bytes: u64,
    /// What it holds them as (`label -> bytes`), largest first; what no entry explains is
    /// the component's own slack (free space in an arena's blocks).
    pub detail: Vec<(String, u64)>,
    /// How the component labels its wgpu resources (a prefix), so that the allocator
    /// report of wgpu can tell them apart from the app's.
    pub label_prefix: Option<String>,
}

/// A component whose bytes live in its own structures, read when a report is made.
pub(crate) trait MemorySource: Send + Sync {
    /// Its lines now. Called with no lock of the book held.
    fn lines(&self) -> Vec<SourceLine>;
}

/// The book of one device (inside its `Gpu`).
pub(crate) struct Accounts {
    book: Mutex<Book>,
    /// The growth watch's memory of the frame before, per app owner (`ledger/growth.rs`).
    pub(crate) growth: Mutex<FxHashMap<String, Streak>>,
}

/// What the growth watch remembers of one owner (`ledger/growth.rs`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Streak {
    /// The owner's counters at the end of the frame before.
    pub bytes: u64,
    pub created: u64,
    pub dropped: u64,
    /// Frames that grew with nothing dropped, since the last drop.
    pub frames: u32,
    /// Bytes those frames added.
    pub grown: u64,
    /// Frames in a row with no change.
    pub quiet: u32,
    /// Whether the warning was logged for this streak.
    pub warned: bool,
}

#[derive(Default)]
struct Book {
    accounts: FxHashMap<(Part, Arc<str>), Arc<Account>>,
    sources: Vec<Weak<dyn MemorySource>>,
}

impl Default for Accounts {
    fn default() -> Self {
        Accounts {
            book: Mutex::new(lock_rank::ACCOUNTS, Book::default()),
            growth: Mutex::new(lock_rank::LEDGER_GROWTH, FxHashMap::default()),
        }
    }
}

impl Accounts {
    /// The account `name` of `part`, opened on first use.
    pub(crate) fn account(&self, part: Part, kind: MemoryKind, name: &str) -> Arc<Account> {
        let mut book = self.book.lock();
        if let Some(a) = book.accounts.get(&(part, Arc::from(name))) {
            return a.clone();
        }
        let name: Arc<str> = Arc::from(name);
        let account = Arc::new(Account {
            part,
            kind,
            name: name.clone(),
            bytes: AtomicU64::new(0),
            held: AtomicU64::new(0),
            created: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        });
        book.accounts.insert((part, name), account.clone());
        account
    }

    /// Files `source`, read by every report while it lives.
    pub(crate) fn register(&self, source: Weak<dyn MemorySource>) {
        let mut book = self.book.lock();
        book.sources.retain(|s| s.strong_count() > 0);
        book.sources.push(source);
    }

    /// Every account's counters (accounts that hold nothing and have no handle left are
    /// closed on the way), sorted by part and name.
    pub(crate) fn readings(&self) -> Vec<AccountReading> {
        let mut book = self.book.lock();
        book.accounts
            .retain(|_, a| Arc::strong_count(a) > 1 || a.held.load(Ordering::Relaxed) > 0);
        let mut out: Vec<AccountReading> = book.accounts.values().map(|a| a.reading()).collect();
        drop(book);
        out.sort_by(|a, b| (a.part, &a.name).cmp(&(b.part, &b.name)));
        out
    }

    /// The lines of every live source, read with no lock of the book held.
    pub(crate) fn source_lines(&self) -> Vec<SourceLine> {
        let sources: Vec<Arc<dyn MemorySource>> = {
            let mut book = self.book.lock();
            book.sources.retain(|s| s.strong_count() > 0);
            book.sources.iter().filter_map(Weak::upgrade).collect()
        };
        // (The last handle of a source may drop here, after the lock: the rule of LAYOUT.)
        sources.iter().flat_map(|s| s.lines()).collect()
    }
}

impl crate::Gpu {
    /// This device's book of accounts.
    pub(crate) fn accounts(&self) -> &Accounts {
        &self.inner.accounts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_adds_its_bytes_until_it_drops_and_the_account_closes_when_nothing_holds_it() {
        let book = Accounts::default();
        let scene = book.account(Part::App, MemoryKind::Device, "scene");
        let a = scene.charge(1000);
        let mut b = book
            .account(Part::App, MemoryKind::Device, "scene")
            .charge(24);
        assert_eq!(book.readings()[0].bytes, 1024);
        assert_eq!(book.readings()[0].held, 2);
        b.set(100);
        assert_eq!(book.readings()[0].bytes, 1100);
        drop(a);
        let r = &book.readings()[0];
        assert_eq!((r.bytes, r.held, r.created, r.dropped), (100, 1, 2, 1));
        drop(scene);
        assert_eq!(book.readings().len(), 1, "a charge still holds the account");
        drop(b);
        assert!(book.readings().is_empty());
    }
}
