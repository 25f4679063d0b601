/* The one list of gvmshim's options.
 *
 * Every option is one line X(name, type, default_text, when, "doc"): the
 * name is the file key and, uppercased after "GVM_", the environment
 * variable. `when` is `live` for an option `gvmctl set` may change in a
 * running process (policy/set.c applies it), `start` for one that holds
 * from the start to the exit. From this list alone come the option enum,
 * the fields of struct gvm_config, the parser dispatch, the defaults
 * (default_text goes through the same parser as user input),
 * --help-config, the README table and the dump.
 *
 * To add an option: add a line here (and a case to check_option() in
 * config_types.c if its type alone does not bound it). To add a set of words:
 * add it to GVM_ENUM_TYPES, nothing more. To add another type T: add it to
 * GVM_OPTION_TYPES, typedef gvm_opt_T_t in config.h and write parse_T and
 * format_T in config_types.c; the build fails until all of them exist.
 *
 * "none" (unlimited) is accepted exactly by the options whose default is
 * "none". Range checks beyond the type live in check_option() in config_types.c.
 */
#ifndef GVM_POLICY_OPTIONS_H
#define GVM_POLICY_OPTIONS_H

#define GVM_OPTIONS(X)                                                         \
    X(disable, bool, "0", start,                                               \
      "pure pass-through: gvmshim serves nothing")                             \
    X(log, level, "warn", live,                                                \
      "stderr logging, lines prefixed 'gvmshim:'")                             \
    X(stats, string, "", start,                                                \
      "1: print a summary to stderr at exit; any other value is a path the "   \
      "summary is written to as JSON; empty: off")                             \
    X(config, path, "", start,                                                 \
      "configuration file to read (environment only)")                         \
    X(libcuda, path, "libcuda.so.1", start,                                    \
      "driver library gvmshim loads")                                          \
    X(small_max, size, "1M", start,                                            \
      "allocations up to this size are packed into shared 2 MiB chunks "       \
      "(0 to 1M)")                                                             \
    X(block_size, size, "64M", start,                                          \
      "largest physical piece of a large allocation, the unit migrations "     \
      "pipeline (a power-of-two multiple of 2M, 2M to 1G)")                    \
    X(grow_block, size, "16G", start,                                          \
      "largest physical piece of an untagged allocation on its own device, "   \
      "created at allocation or by gvm_realloc growing it, while spill is "    \
      "off (else block_size): fewer driver calls, but its first move to "      \
      "host remaps it whole (a power-of-two multiple of 2M, 2M to 64G)")       \
    X(headroom, ratio_pct, "100%", start,                                      \
      "extra virtual address space reserved after each large allocation so "   \
      "it can grow in place, as a fraction of its size (0% to 1000%)")         \
    X(cache_limit, size_pct_dev, "10%", start,                                 \
      "freed allocations kept mapped for reuse, per device")                   \
    X(cache_idle, millis, "100ms", live,                                       \
      "as a native free gives memory back at once: an allocation freed this "  \
      "long or longer after it was made goes back to the device at its free, " \
      "and one kept for reuse goes back after this long unused (0: kept "      \
      "until memory is needed; up to 1h)")                                     \
    X(pool_limit, size_pct_dev, "5%", start,                                   \
      "ready physical pieces kept per device for migrations")                  \
    X(host_pool, size, "4G", start,                                            \
      "ready pinned host pieces kept for migrations to host")                  \
    X(host_prefill, host_prefill, "auto", start,                               \
      "create the host pool's pieces ahead of need on a background thread: "   \
      "auto (once host memory is in play: spill or a rule to host, host_pool " \
      "set, a tag pushed, a first move to host), on (at start), off (on "      \
      "demand only)")                                                          \
    X(pause_pool, bool, "1", start,                                            \
      "the host pool grows to hold the largest gvm_pause that keeps a copy, "  \
      "so the next pause finds its host memory ready (that much pinned host "  \
      "memory stays held between pauses)")                                     \
    X(pause_host_map, spill_host_map, "eager", live,                           \
      "what a pause that keeps its copy, or a release from outside (a limit "  \
      "lowered live, a process giving way), leaves at the allocations' "       \
      "addresses: its host memory, mapped by the move itself (eager), or "     \
      "nothing until the program reaches them (lazy: the device memory is "    \
      "free at the speed of the copy, into the process's own registered "      \
      "pages; the next launch, a graph's, or a CPU touch maps every such "     \
      "copy first, a copy or set the ones it names; every launch holds the "   \
      "move gate meanwhile, two atomic adds; not with track_launches=off)")    \
    X(host_register, bool, "1", start,                                         \
      "host memory that only copies reach (lazy spills, unmapped pauses) "     \
      "may be the process's own pages pinned with cuMemHostRegister, made "    \
      "on several threads beside the copies, where no pooled piece is ready "  \
      "(a first 8 GiB pause about 6x faster than with created pinned memory; " \
      "0: cuMemCreate only)")                                                  \
    X(host_access, host_access, "lazy", start,                                 \
      "when the CPU gets access to host-resident allocations: at the move "    \
      "(eager), at its first CPU touch (lazy), never (off)")                   \
    X(device_limit, size_pct_dev, "none", live,                                \
      "most memory gvmshim lets the program hold on each device "              \
      "(none: the device's capacity)")                                         \
    X(host_limit, size, "none", live,                                          \
      "most host memory gvmshim uses for spilled or migrated allocations "     \
      "(none: unlimited)")                                                     \
    X(spill, spill, "off", live,                                               \
      "where allocations go when a device is at its limit: off (fail as "      \
      "natively) or the targets peer, host in the order to try")               \
    X(spill_mode, spill_mode, "evict", live,                                   \
      "make room by moving least recently used allocations out (evict) or "    \
      "put the new allocation on the spill target (place)")                    \
    X(promote, bool, "1", live,                                                \
      "bring spilled allocations back when room returns and they are used "    \
      "again")                                                                 \
    X(promote_rate, size, "8G", live,                                          \
      "at most this many bytes promoted per second (more than 0)")             \
    X(promote_interval, millis, "50ms", live,                                  \
      "how often the promoter looks (1ms to 1h)")                              \
    X(swap_in, swap_in, "host", live,                                          \
      "which spilled allocations a kernel launch brings back to its device "   \
      "when other data must leave for them: host (all but those on a peer "    \
      "GPU joined by NVLink: read in place over it), all, or none (every "     \
      "kernel reads spilled data in place)")                                   \
    X(spill_host_map, spill_host_map, "eager", live,                           \
      "what a spill to host leaves at the allocation's addresses: its host "   \
      "memory, mapped (eager: every pointer reaches it, and the mapping "      \
      "costs about as much as the copy), or nothing until the program uses "   \
      "it (lazy: a swap costs only its copies; a kernel reaching spilled "     \
      "memory through a pointer that is not one of its arguments, such as "   \
      "an address stored in device memory, faults)")                          \
    X(learn_loop, bool, "1", live,                                             \
      "once spilling, learn the program's loop from its launches and send "    \
      "out first what it needs furthest ahead (0: least recently used first)") \
    X(prefetch, bool, "1", live,                                               \
      "with spill_host_map=lazy: a background thread swaps in the spilled "    \
      "allocation the program needs next while the kernels before it run "     \
      "(its copies overlap the program's work; what leaves is what the loop "  \
      "needs furthest ahead, and a kernel reaching it through a pointer that " \
      "is not one of its arguments may read it mid-copy)")                     \
    X(prefetch_trial, bool, "1", live,                                         \
      "with prefetch on: once the loop is learned, time a few of its steps "   \
      "with the prefetch and a few without, keep the faster for the next "     \
      "100 steps, then try again (0: prefetch at every step)")                 \
    X(track_launches, track_launches, "auto", start,                           \
      "scan kernel launch arguments for recency (auto: while spill is on, "    \
      "set at start or with gvmctl set; off: launches are not even hooked)")   \
    X(control, bool, "1", start,                                               \
      "serve gvmctl: a control socket per process, in a private runtime "      \
      "directory ($XDG_RUNTIME_DIR/gvmshim or /tmp/gvmshim-UID), same user "   \
      "only")                                                                  \
    X(trace, string, "", start,                                                \
      "a path (%p: the process id) to write a timeline of moves and memory "   \
      "per location to, in the Chrome trace-event format (Perfetto); empty: "  \
      "off")                                                                   \
    X(trace_max, size, "64M", start,                                           \
      "the trace file stops growing at this size (at least 4K)")               \
    X(share, bool, "0", start,                                                 \
      "share each device's memory with the other processes under gvmshim "     \
      "that use the same share_dir: together they hold at most "               \
      "share_budget; one that needs memory the budget lacks has the others "   \
      "give back their least recently used memory, idle ones first (turns "    \
      "spill=host on where spill is off)")                                     \
    X(share_dir, path, "", start,                                              \
      "the directory of the shared state (empty: the private runtime "         \
      "directory, $XDG_RUNTIME_DIR/gvmshim or /tmp/gvmshim-UID: processes of " \
      "the same user; a directory an administrator made for a group, mode "    \
      "2770, shares between its members)")                                     \
    X(share_budget, size_pct_dev, "none", live,                                \
      "what the sharing processes hold together on each device (none: the "   \
      "device's memory less 1 GiB for contexts and memory outside gvmshim)")   \
    X(share_min, size, "0", live,                                              \
      "memory this process keeps on each device however much others need")    \
    X(share_weight, ratio_pct, "1", live,                                      \
      "among idle processes, and among busy ones, those of lower weight give " \
      "way first (0.1 to 100)")                                                \
    X(share_wait, millis, "2s", live,                                          \
      "how long an allocation waits for other processes to give memory back " \
      "before it spills this process's own least recently used memory")        \
    X(launch_log, string, "", start,                                           \
      "a path (%p: the process id) to write at exit which allocations each "   \
      "scanned kernel launch reached, in order, for "                          \
      "scripts/probe/optimal.py (launches are scanned with track_launches: "   \
      "by default while spill is on); empty: off")

/* Types that are a set of words: E(type, VALUES), where VALUES(V) lists
 * V(ENUMERATOR, word). The C enum is enum gvm_cfg_<type>, in list order. */
#define GVM_ENUM_TYPES(E)                                                      \
    E(level, GVM_LEVEL_VALUES)                                                 \
    E(host_access, GVM_HOST_ACCESS_VALUES)                                     \
    E(spill_mode, GVM_SPILL_MODE_VALUES)                                       \
    E(track_launches, GVM_TRACK_LAUNCHES_VALUES)                               \
    E(host_prefill, GVM_HOST_PREFILL_VALUES)                                   \
    E(swap_in, GVM_SWAP_IN_VALUES)                                             \
    E(spill_host_map, GVM_SPILL_HOST_MAP_VALUES)

/* Same order as enum gvm_log_level in core/log.h. */
#define GVM_LEVEL_VALUES(V)                                                    \
    V(GVM_CFG_LOG_ERROR, error)                                                \
    V(GVM_CFG_LOG_WARN, warn)                                                  \
    V(GVM_CFG_LOG_INFO, info)                                                  \
    V(GVM_CFG_LOG_DEBUG, debug)

/* Same order as enum gvm_host_access in core/settings.h. */
#define GVM_HOST_ACCESS_VALUES(V)                                              \
    V(GVM_CFG_HOST_ACCESS_EAGER, eager)                                        \
    V(GVM_CFG_HOST_ACCESS_LAZY, lazy)                                          \
    V(GVM_CFG_HOST_ACCESS_OFF, off)

#define GVM_SPILL_MODE_VALUES(V)                                               \
    V(GVM_CFG_SPILL_EVICT, evict)                                              \
    V(GVM_CFG_SPILL_PLACE, place)

#define GVM_SPILL_HOST_MAP_VALUES(V)                                           \
    V(GVM_CFG_SPILL_HOST_MAP_EAGER, eager)                                     \
    V(GVM_CFG_SPILL_HOST_MAP_LAZY, lazy)

#define GVM_TRACK_LAUNCHES_VALUES(V)                                           \
    V(GVM_CFG_TRACK_AUTO, auto)                                                \
    V(GVM_CFG_TRACK_ON, on)                                                    \
    V(GVM_CFG_TRACK_OFF, off)

/* Same order as enum gvm_host_prefill in core/settings.h. */
#define GVM_HOST_PREFILL_VALUES(V)                                             \
    V(GVM_CFG_PREFILL_AUTO, auto)                                              \
    V(GVM_CFG_PREFILL_ON, on)                                                  \
    V(GVM_CFG_PREFILL_OFF, off)

#define GVM_SWAP_IN_VALUES(V)                                                  \
    V(GVM_CFG_SWAP_IN_HOST, host)                                              \
    V(GVM_CFG_SWAP_IN_ALL, all)                                                \
    V(GVM_CFG_SWAP_IN_NONE, none)

/* The other types: T(type, "what a value looks like", for the help). */
#define GVM_OPTION_TYPES(T)                                                    \
    T(bool, "1/0, yes/no, true/false, on/off")                                 \
    T(size, "bytes, optional binary suffix K/M/G/T: 512M, 1.5G")               \
    T(size_pct, "a size, or a percentage of the device's memory: 80%")         \
    T(size_pct_dev, "a size or percentage for every device, or a list "        \
                    "0:8G,1:16G,2:50% (unlisted devices: the default)")        \
    T(ratio_pct, "a percentage (150%) or a factor (1.5)")                      \
    T(spill, "off, or an ordered list of peer, host: peer,host")               \
    T(millis, "milliseconds, optional suffix ms or s: 50ms, 2s")               \
    T(path, "a file path")                                                     \
    T(string, "text")

/* `when` as a truth value: GVM_OPTION_LIVE(when). */
#define GVM_OPTION_LIVE_live 1
#define GVM_OPTION_LIVE_start 0
#define GVM_OPTION_LIVE(when) GVM_OPTION_LIVE_##when

enum gvm_option {
#define GVM_OPTION_ENUM(name, type, def, when, doc) GVM_OPT_##name,
    GVM_OPTIONS(GVM_OPTION_ENUM)
#undef GVM_OPTION_ENUM
    GVM_OPT_COUNT
};

#endif
