/* The configuration in force, and what it means for the layers below:
 * core's settings in absolute values once the devices are known, and
 * whether kernel launches are worth watching. */
#ifndef GVM_POLICY_DERIVE_H
#define GVM_POLICY_DERIVE_H

#include "core/settings.h"
#include "core/topo.h"
#include "policy/config.h"

#include <stdbool.h>

/* The configuration the process runs with, loaded once at library load. */
extern struct gvm_config gvm_cfg;

/* Core's settings for cfg on the machine topo describes (percentages are
 * of each device's memory). */
void gvm_policy_settings(const struct gvm_config *cfg, const struct gvm_topo *topo,
                         struct gvm_settings *out);

/* Whether launches are scanned for recency: asked for (on), or wanted
 * because spilling needs to know what is hot (auto with spill on). */
bool gvm_policy_tracks_launches(const struct gvm_config *cfg);

#endif
