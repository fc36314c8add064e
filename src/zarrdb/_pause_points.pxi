# Named pause points of the engine (_pause_points.h), tied to zarrdb._pause: test builds only
# (ZARRDB_TEST_VFS=1 at build time); elsewhere _PAUSE_POINTS is False and there are no points.

import traceback

cdef extern from "_pause_points.h" nogil:
    ctypedef void (*zpp_hook_t)(const char* name)
    int ZPP_BUILT
    int zpp_install(zpp_hook_t hook)
    void zpp_point(const char* name)

# Whether this build has the pause points (a test build) at all.
_PAUSE_POINTS = bool(ZPP_BUILT)


cdef object _pause_point = None  # what the points call once installed (zarrdb._pause.point)


cdef void _pause_from_c(const char* name) noexcept nogil:
    # From any thread, the writer's too (never under its mutex): zarrdb._pause decides.
    with gil:
        try:
            _pause_point(name.decode("ascii"))
        except BaseException:  # a hook's failure is the test's to see, not the engine's
            traceback.print_exc()


def install_pause_hook(point):
    """Tests only: make the engine's points call `point(name)` (None: nothing). Returns False
    where the points are not built."""
    global _pause_point
    if not ZPP_BUILT:
        return False
    _pause_point = point
    if point is None:
        return bool(zpp_install(NULL))
    return bool(zpp_install(_pause_from_c))
