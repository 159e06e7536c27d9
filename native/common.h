/*
 * Shared between the launcher (host side, root) and the reaper (inside the sandbox).
 *
 * The reaper writes exactly one line to the report fd the launcher hands it:
 *
 *   hangar-reaper 1 exited   <code>   <maxrss_kb> <wall_us>
 *   hangar-reaper 1 signaled <signo>  <maxrss_kb> <wall_us>
 *   hangar-reaper 1 execfail <errno>  0           0
 *
 * Nothing else crosses that channel, and the launcher parses it strictly (numbers only), so a program that
 * somehow reached the fd could at worst misreport its own result.
 */
#ifndef HANGAR_COMMON_H
#define HANGAR_COMMON_H

#define HANGAR_REPORT_MAGIC "hangar-reaper"
#define HANGAR_REPORT_VERSION 1

/* Where the tools dir is bind-mounted (read-only) inside the sandbox, and the reaper in it. */
#define HANGAR_TOOLS_PATH "/.hangar"
#define HANGAR_REAPER_PATH "/.hangar/init"

#endif
