/* Where memory lives: a device ordinal (0 ..), host memory, or one of the
 * answers about a region that is not at one place. */
#ifndef GVM_LOCATION_H
#define GVM_LOCATION_H

#define GVM_MAX_DEVICES 64
#define GVM_LOC_HOST (-1)
#define GVM_LOC_MIXED (-2)   /* a region whose pieces are at several places */
#define GVM_LOC_NONE (-3)    /* nothing mapped, or no place */
#define GVM_LOC_SLOTS (GVM_MAX_DEVICES + 1) /* devices, then host */

/* The index of loc (a device or GVM_LOC_HOST) in per-location arrays. */
static inline int gvm_loc_slot(int loc) { return loc < 0 ? GVM_MAX_DEVICES : loc; }

#endif
