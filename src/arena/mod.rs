//! arena (in progress)
#[derive(Debug)]
pub struct OutOfMemory;
impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("oom")
    }
}
impl std::error::Error for OutOfMemory {}
pub struct Allocation;
pub struct Arena;
pub struct ArenaConfig;
