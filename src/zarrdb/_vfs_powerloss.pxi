# A power-loss simulator for tests: a VFS that wraps SQLite's default one and plays a disk with
# a volatile write cache that loses power (_vfs_powerloss.h says exactly how). Included into
# _core.pyx, so it is the SQLite every connection of the process uses; it is registered only
# once a test calls _powerloss_enable(), and until then it does not exist. Only test builds
# (ZARRDB_TEST_VFS=1 at build time) compile it; elsewhere _POWERLOSS_VFS is False and
# _powerloss_enable() raises NotImplementedError.

cdef extern from "_vfs_powerloss.h" nogil:
    int ZPL_OK, ZPL_ERR_ENABLED, ZPL_ERR_UNSUPPORTED, ZPL_ERR_NOMEM, ZPL_ERR_NOT_BUILT
    int ZPL_BUILT
    int zpl_enable(uint64_t seed, double keep, double tear, int64_t sector, int exit_code,
                   int trace)
    void zpl_cut(int64_t after)
    int64_t zpl_events()

# Whether this build has the simulator (a test build) at all.
_POWERLOSS_VFS = bool(ZPL_BUILT)


def _powerloss_enable(seed, *, keep=0.5, tear=0.25, sector=512, exit_code=77, trace=False):
    """Tests only, POSIX only, once per process and before any file is opened: from now on the
    files of every SQLite connection of this process are on a simulated disk, which loses
    power when _powerloss_cut() says. Each write not synced by then is kept (probability
    `keep`), torn (`tear`: each of its `sector`-byte sectors written or not) or dropped; the
    process then ends with _exit(exit_code). `seed` decides every choice. trace: every file
    operation and every choice at the cut printed on stderr."""
    cdef int rc
    keep = float(keep)
    tear = float(tear)
    if not (0.0 <= keep <= 1.0 and 0.0 <= tear <= 1.0 and keep + tear <= 1.0):
        raise ValueError(
            f"keep and tear are probabilities that add up to at most 1, not {keep} and {tear}"
        )
    if int(sector) < 1 or not 1 <= int(exit_code) <= 255:
        raise ValueError("sector >= 1 and 1 <= exit_code <= 255")
    rc = zpl_enable(<uint64_t>(int(seed) & 0xFFFFFFFFFFFFFFFF), keep, tear, int(sector),
                    int(exit_code), bool(trace))
    if rc == ZPL_ERR_ENABLED:
        raise RuntimeError("the power-loss simulation is enabled already in this process")
    if rc == ZPL_ERR_NOT_BUILT:
        raise NotImplementedError(
            "this build of zarrdb has no power-loss simulation: only test builds have it "
            "(built with ZARRDB_TEST_VFS=1, as scripts/dev.sh does)"
        )
    if rc == ZPL_ERR_UNSUPPORTED:
        raise NotImplementedError("the power-loss simulation needs a POSIX system")
    if rc != ZPL_OK:
        raise MemoryError()


def _powerloss_cut(after=0):
    """Tests only: lose power now (after=0: once a file operation under way has finished; the
    process ends and this never returns), or at the after-th event from now (a write,
    truncation, sync, creation or deletion of one of SQLite's files). No-op when the
    simulation is off."""
    cdef int64_t n = int(after)
    if n < 0:
        raise ValueError(f"after must be >= 0, not {after}")
    with nogil:
        zpl_cut(n)


def _powerloss_events():
    """Tests only: the simulation's events so far; 0 when it is off."""
    return zpl_events()
