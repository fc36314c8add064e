/*
 * Named pause points on the engine's write path, for the schedule explorer's tests.
 *
 * zpp_point("name") marks a place where a test may hold the calling thread (until another
 * thread reaches some point, or the test lets it go): deterministic interleavings instead of
 * sleeps. A test installs one hook (zpp_install) that takes the GIL and calls the Python side
 * (zarrdb._pause); every point then calls it. A point is never placed while the writer's mutex
 * is held: the hook waits for the GIL, and nothing may wait for the GIL under that mutex.
 *
 * Compiled only into test builds (ZARRDB_TEST_VFS, as the power-loss simulator is). In a
 * release build, every wheel, zpp_point() expands to nothing, so neither the points' names
 * nor any call is in the extension, and zpp_install() reports that the points are not built.
 */
#ifndef ZARRDB_PAUSE_POINTS_H
#define ZARRDB_PAUSE_POINTS_H

typedef void (*zpp_hook_t)(const char *name);

/* gcc and clang only (their atomics): the test builds are made with them. */
#if defined(ZARRDB_TEST_VFS) && (defined(__GNUC__) || defined(__clang__))
#define ZPP_BUILT 1

static zpp_hook_t zpp_hook = 0;

/* Installed or removed with the GIL held; read by any thread, so atomically. */
static int zpp_install(zpp_hook_t hook) {
    __atomic_store_n(&zpp_hook, hook, __ATOMIC_RELEASE);
    return 1;
}

static void zpp_point(const char *name) {
    zpp_hook_t hook = __atomic_load_n(&zpp_hook, __ATOMIC_ACQUIRE);
    if (hook) {
        hook(name);
    }
}
#else
#define ZPP_BUILT 0
#define zpp_install(hook) (0)
#define zpp_point(name) ((void)0)
#endif

#endif /* ZARRDB_PAUSE_POINTS_H */
