/* The CLI's option tables (client/src/cli_commands.c and the cmd_*.c
 * tables): every option of every command, its own, the model options and
 * the global ones, appears in that command's --help and is accepted by its
 * parser, by its long and its short name, returning its id with its value;
 * no two options of a command share a name or an id; every option row the
 * help prints is one the parser accepts; and vmclient's own options before
 * the command are in its usage screen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The help of c as a string (free it). */
static char *help_of(const cli_command_t *c) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  assert_non_null(f);
  if (c)
    cli_print_command_help(f, c);
  else
    cli_print_usage(f);
  assert_int_equal(fclose(f), 0);
  return buf;
}

/* 1 when help has a row for option o: a line starting "  --NAME" or
 * "  -X, --NAME", the name followed by its value or by spaces. */
static int help_has_row(const char *help, const cli_opt_t *o) {
  char want[128];
  if (o->short_name)
    snprintf(want, sizeof(want), "\n  -%c, --%s%s%s", o->short_name, o->long_name,
             o->arg ? " " : "", o->arg ? o->arg : "");
  else
    snprintf(want, sizeof(want), "\n  --%s%s%s", o->long_name, o->arg ? " " : "",
             o->arg ? o->arg : "");
  for (const char *p = strstr(help, want); p; p = strstr(p + 1, want)) {
    char next = p[strlen(want)];
    if (next == ' ' || next == '\n') return 1;
  }
  return 0;
}

/* Parses {cmd, arg, value} with c's tables; returns what cli_next_arg
 * returned first and checks the value it handed back. */
static int parse_one(const cli_command_t *c, const char *arg, const char *value) {
  char *argv[4] = {(char *)c->name, (char *)arg, (char *)value, NULL};
  cli_args_t a;
  cli_args_init(&a, c, value ? 3 : 2, argv);
  const char *val = NULL;
  int r = cli_next_arg(&a, &val);
  if (value && r > 0) {
    assert_non_null(val);
    assert_string_equal(val, value);
  }
  if (r > 0) assert_int_equal(cli_next_arg(&a, &val), CLI_ARG_END);
  return r;
}

static void check_option(const cli_command_t *c, const char *help, const cli_opt_t *o) {
  if (!help_has_row(help, o))
    fail_msg("vmclient %s --help has no row for --%s", c->name, o->long_name);
  assert_non_null(o->help);
  assert_true(o->help[0] != '\0');
  assert_true(o->id > 0 || o->id == CLI_OPT_HELP);
  char arg[80];
  snprintf(arg, sizeof(arg), "--%s", o->long_name);
  int r = parse_one(c, arg, o->arg ? "VALUE" : NULL);
  if (r != o->id) fail_msg("vmclient %s: %s parsed as %d, not %d", c->name, arg, r, o->id);
  if (o->arg) { /* --name=value too */
    char eq[96];
    snprintf(eq, sizeof(eq), "--%s=VALUE", o->long_name);
    assert_int_equal(parse_one(c, eq, NULL), o->id);
  }
  if (o->short_name) {
    snprintf(arg, sizeof(arg), "-%c", o->short_name);
    r = parse_one(c, arg, o->arg ? "VALUE" : NULL);
    if (r != o->id) fail_msg("vmclient %s: %s parsed as %d, not %d", c->name, arg, r, o->id);
  }
}

/* Every option of every command is in its help and accepted by its
 * parser; names and ids are unique within a command. */
static void test_every_option_in_help_and_parser(void **state) {
  (void)state;
  size_t checked = 0;
  for (size_t i = 0; i < cli_num_commands; i++) {
    const cli_command_t *c = &cli_commands[i];
    char *help = help_of(c);
    cli_args_t a;
    cli_args_init(&a, c, 1, (char *[]){(char *)c->name, NULL});
    const cli_opt_t *seen[128];
    size_t ns = 0;
    for (int t = 0; a.tables[t]; t++)
      for (const cli_opt_t *o = a.tables[t]; o->long_name; o++) {
        check_option(c, help, o);
        for (size_t k = 0; k < ns; k++) {
          if (strcmp(seen[k]->long_name, o->long_name) == 0 || seen[k]->id == o->id ||
              (o->short_name && seen[k]->short_name == o->short_name))
            fail_msg("vmclient %s: --%s and --%s share a name or id", c->name,
                     seen[k]->long_name, o->long_name);
        }
        assert_true(ns < 128);
        seen[ns++] = o;
        checked++;
      }
    /* -h, --help is in every help and parsed as help */
    assert_non_null(strstr(help, "\n  -h, --help "));
    assert_int_equal(parse_one(c, "--help", NULL), CLI_OPT_HELP);
    assert_int_equal(parse_one(c, "-h", NULL), CLI_OPT_HELP);
    if (c->model) assert_non_null(strstr(help, "\n  -i, --input P=FILE.npy "));
    if (c->net) assert_non_null(strstr(help, "\n  --host URL "));
    free(help);
  }
  assert_true(checked > 100); /* the tables are really walked */
}

/* The other direction: every option row the help prints ("  --NAME" or
 * "  -X, --NAME" at the start of a line) is accepted by the parser, so the
 * help lists nothing the command would refuse. */
static void test_every_help_row_is_parsed(void **state) {
  (void)state;
  for (size_t i = 0; i < cli_num_commands; i++) {
    const cli_command_t *c = &cli_commands[i];
    char *help = help_of(c);
    size_t rows = 0;
    for (char *line = help; line && *line;) {
      char *nl = strchr(line, '\n');
      const char *p = line + 2;
      if (strncmp(line, "  -", 3) == 0 && line[3] != '-' && line[4] == ',') p = line + 6;
      if (strncmp(line, "  -", 3) == 0 && strncmp(p, "--", 2) == 0) {
        char name[80];
        size_t k = 0;
        while (k + 1 < sizeof(name) && (isalnum((unsigned char)p[k]) || p[k] == '-')) {
          name[k] = p[k];
          k++;
        }
        name[k] = '\0';
        int takes = p[k] == ' ' && p[k + 1] != ' ';
        int r = parse_one(c, name, takes ? "VALUE" : NULL);
        if (r <= 0 && r != CLI_OPT_HELP)
          fail_msg("vmclient %s --help lists %s, which its parser refuses", c->name, name);
        rows++;
      }
      line = nl ? nl + 1 : NULL;
    }
    assert_true(rows >= 1);
    free(help);
  }
}

/* An option of another command is refused: the tables are per command. */
static void test_options_are_per_command(void **state) {
  (void)state;
  const cli_command_t *run = cli_find_command("run"), *ping = cli_find_command("ping");
  const cli_command_t *disasm = cli_find_command("disasm");
  assert_non_null(run);
  assert_non_null(ping);
  assert_non_null(disasm);
  assert_int_equal(parse_one(ping, "--expected", "x.npy"), CLI_ARG_ERROR);
  assert_int_equal(parse_one(run, "--rtol", "1"), CLI_ARG_ERROR);
  assert_int_equal(parse_one(disasm, "--host", "tcp://127.0.0.1:1"), CLI_ARG_ERROR);
  assert_true(parse_one(cli_find_command("check"), "--rtol", "1") > 0);
}

/* vmclient's usage screen lists the options main() parses before the
 * command. */
static void test_usage_lists_main_options(void **state) {
  (void)state;
  char *help = help_of(NULL);
  for (const cli_opt_t *o = cli_main_opts; o->long_name; o++) assert_true(help_has_row(help, o));
  for (const cli_opt_t *o = cli_global_opts; o->long_name; o++)
    assert_true(help_has_row(help, o));
  for (size_t i = 0; i < cli_num_commands; i++) {
    char want[64];
    snprintf(want, sizeof(want), "\n  %-8s %s", cli_commands[i].name, cli_commands[i].summary);
    assert_non_null(strstr(help, want));
  }
  free(help);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_option_in_help_and_parser),
      cmocka_unit_test(test_every_help_row_is_parsed),
      cmocka_unit_test(test_options_are_per_command),
      cmocka_unit_test(test_usage_lists_main_options),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
