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
    fprintf(out, "usage: gvm-config --help-config | --markdown | --check [FILE] | --help\n");
}

static void manual(void)
{
    fputs("NAME\n"
          "    gvm-config - document and check gvmshim's configuration\n"
          "\n"
          "SYNOPSIS\n"
          "    gvm-config --help-config\n"
          "    gvm-config --markdown\n"
          "    gvm-config --check [FILE]\n"
          "    gvm-config --help\n"
          "\n"
          "DESCRIPTION\n"
          "    Reads gvmshim's configuration exactly as the library does at load\n"
          "    (built-in defaults, then the file named by GVM_CONFIG, then GVM_*\n"
          "    variables), without starting a program. gvmrun runs --check before\n"
          "    the program it starts.\n"
          "\n"
          "OPTIONS\n"
          "    --help-config   every option: environment name, file key, type,\n"
          "                    default and description, then the file syntax\n"
          "    --markdown      the options as the Markdown table of the README\n"
          "    --check [FILE]  load the environment (and FILE in place of\n"
          "                    GVM_CONFIG) and print the effective values, each\n"
          "                    with where it came from\n"
          "    -h, --help      this manual\n"
          "\n"
          "EXIT STATUS\n"
          "    0 on success; 1 with one line naming the source, the option and\n"
          "    the value when the configuration is bad; 2 on a usage error.\n",
          stdout);
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
        manual();
        return 0;
    }
    usage(stderr);
    return 2;
}
