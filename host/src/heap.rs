//! The allocator's freed memory, given back to the kernel after the rare
//! operations that use much of it at once. mimalloc (the server's allocator,
//! `main.rs`) keeps freed memory for reuse, and purges it only as later
//! allocations come; a deploy holds and parses a component of up to 32 MiB,
//! and between deploys nothing reuses that memory. A leaf.

/// Returns the memory the allocator holds free to the kernel. Costs a walk
/// of the allocator's free pages: for rare, large operations only, never on
/// a call's path.
pub fn give_back() {
    // SAFETY: `mi_collect` only walks mimalloc's own structures, from any
    // thread; when mimalloc is not the global allocator (the benchmark's
    // in-process arms, say) it has little or nothing to walk.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
