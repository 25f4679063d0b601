/* gvm-config: documents gvmshim's options and checks a configuration the
 * way the library will read it, without starting a program.
 *
 *   gvm-config --help-config     every option, its type, default and doc
 *   gvm-config --markdown        the README table
 *   gvm-config --check [FILE]    load the environment (and FILE instead of
 *                                GVM_CONFIG), print the effective values;
 *                                exit 1 with the error line on bad input */
#include "policy/config.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "usage: gvm-config --help-config | --markdown | --check [FILE]\n"
                 "  --help-config   list every option (environment name, file key, type,\n"
                 "                  default, description) and the config file syntax\n"
                 "  --markdown      the options as a Markdown table\n"
                 "  --check [FILE]  read the configuration as gvmshim would (the environment,\n"
                 "                  and FILE in place of GVM_CONFIG) and print the effective\n"
                 "                  values; exit status 1 and the error on bad input\n");
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--help-config") == 0) {
        gvm_config_print_help(stdout);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--markdown") == 0) {
        gvm_config_print_markdown(stdout);
        return 0;
    }
    if ((argc == 2 || argc == 3) && strcmp(argv[1], "--check") == 0) {
        static struct gvm_config cfg;
        char err[GVM_CFG_ERR_MAX];
        if (gvm_config_load_from(&cfg, NULL, argc == 3 ? argv[2] : NULL, err, sizeof err)) {
            fprintf(stderr, "gvmshim: %s\n", err);
            return 1;
        }
        gvm_config_dump(&cfg, stdout);
        return 0;
    }
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    usage(stderr);
    return 2;
}
