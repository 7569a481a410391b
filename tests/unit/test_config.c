/* Unit tests for the server configuration: secure defaults, each invalid
 * setting refused with a message naming its key (and never a secret
 * value), token lookup, secret lookup and the mount allowlist. */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "services/config.h"
#include "services/redact.h"

#define SECRET_VALUE "sup3r-s3cret-VALUE-42"
#define TOKEN_A      "tokA_0123456789abcdef"
#define TOKEN_B      "tokB_0123456789abcdef"

static char tmpdir[64];

#define PATH_BUF 128 /* tmpdir + a short name */

static int parse(const char *json, struct cage_config **ret, char *msg)
{
        struct cage_error err = {0};
        struct cage_config *cfg = NULL;
        int r = cage_config_parse(json, strlen(json), &cfg, &err);
        snprintf(msg, CAGE_ERROR_MESSAGE_MAX, "%s", err.message);
        if (ret)
                *ret = cfg;
        else
                cage_config_free(cfg);
        return r;
}

/* Expects json to be refused with a message containing every needle. */
static bool refused_naming(const char *json, const char *needle, const char *needle2)
{
        char msg[CAGE_ERROR_MESSAGE_MAX];
        int r = parse(json, NULL, msg);
        bool ok = r < 0 && strstr(msg, needle) && (!needle2 || strstr(msg, needle2));
        ok = ok && !strstr(msg, SECRET_VALUE) && !strstr(msg, TOKEN_A) && !strstr(msg, TOKEN_B);
        if (!ok)
                fprintf(stderr, "  json %s\n  -> r=%d msg \"%s\" (wanted \"%s\")\n", json, r, msg,
                        needle);
        return ok;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        return remove(path);
}

static void remove_tmpdir(void)
{
        nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A path in this run's scratch directory (made on first use, with a
 * data/ folder inside; removed at exit). */
static void tmp_path(char *buf, size_t size, const char *name)
{
        if (!tmpdir[0]) {
                snprintf(tmpdir, sizeof(tmpdir), "/tmp/codecage-test-config-XXXXXX");
                if (!mkdtemp(tmpdir))
                        abort();
                atexit(remove_tmpdir);
                snprintf(buf, size, "%s/data", tmpdir);
                if (mkdir(buf, 0700) < 0)
                        abort();
        }
        snprintf(buf, size, "%s/%s", tmpdir, name);
}

static void write_file(const char *name, const char *content)
{
        char p[PATH_BUF];
        tmp_path(p, sizeof(p), name);
        FILE *f = fopen(p, "we");
        if (f) {
                fputs(content, f);
                fclose(f);
        }
}

TEST(defaults_are_secure_and_valid)
{
        struct cage_config *cfg = NULL;
        struct cage_error err = {0};
        CHECK(cage_config_defaults(&cfg, &err) == 0);
        if (!cfg)
                return;
        CHECK(cfg->limits.memory_mib_max == 4096);
        CHECK(cfg->limits.cpus_max >= 1);
        CHECK(cfg->limits.pids_max == 4096);
        CHECK(cfg->limits.disk_mib_max == 16384);
        CHECK(cfg->limits.timeout_s_max == 3600);
        CHECK(cfg->limits.output_max_bytes_max == 16 * 1024 * 1024);
        CHECK(cfg->limits.max_body_bytes == 16 * 1024 * 1024);
        CHECK(cfg->limits.max_sandboxes_per_tenant == 64);
        CHECK(cfg->defaults.memory_mib == 512);
        CHECK(cfg->defaults.cpus == 1.0);
        CHECK(cfg->defaults.pids == 256);
        CHECK(cfg->defaults.disk_mib == 1024);
        CHECK(cfg->defaults.timeout_s == 30);
        CHECK(cfg->defaults.output_max_bytes == 65536);
        CHECK(cfg->retention_s == 3600 && cfg->idle_timeout_s == 0);
        CHECK(cfg->n_tenants == 0 && cfg->n_secrets == 0 && cfg->n_mounts_allowed == 0);
        CHECK(cfg->n_env_allowlist == 0);
        CHECK(!cage_config_auth_required(cfg));
        CHECK_STREQ(cfg->listen_http, "127.0.0.1:8080");
        CHECK(cfg->http_loopback);
        if (geteuid() == 0)
                CHECK_STREQ(cfg->data_dir, "/var/lib/codecage");
        else
                CHECK(strstr(cfg->data_dir, "codecage") != NULL);
        char want[PATH_MAX];
        snprintf(want, sizeof(want), "%s/codecage.sock", cfg->data_dir);
        CHECK_STREQ(cfg->listen_unix, want);
        snprintf(want, sizeof(want), "%s/audit.jsonl", cfg->data_dir);
        CHECK_STREQ(cfg->audit_log, want);
        /* Nothing is allowed that was not asked for. */
        CHECK(!cage_config_env_allowed(cfg, "HOME"));
        CHECK(cage_config_mount_allowed(cfg, "/tmp", false, NULL, &err) == -EPERM);
        cage_config_free(cfg);

        /* An empty file is the same as no file. */
        char msg[CAGE_ERROR_MESSAGE_MAX];
        CHECK(parse("{}", &cfg, msg) == 0);
        CHECK(cfg && cfg->defaults.memory_mib == 512);
        cage_config_free(cfg);
}

TEST(a_full_config_loads_from_a_file)
{
        char secret_file[PATH_BUF], token_file[PATH_BUF], data[PATH_BUF], cfgpath[PATH_BUF];
        char json[4096];
        tmp_path(secret_file, sizeof(secret_file), "db.secret");
        tmp_path(token_file, sizeof(token_file), "bob.token");
        tmp_path(data, sizeof(data), "data");
        tmp_path(cfgpath, sizeof(cfgpath), "full.json");
        write_file("db.secret", "file-secret-value\n");
        write_file("bob.token", TOKEN_B "\r\n");
        setenv("CODECAGE_TEST_SECRET", "env-secret-value", 1);
        snprintf(json, sizeof(json),
                 "{\"data_dir\": \"%s/state\",\n"
                 " \"listen\": {\"http\": \"0.0.0.0:8443\", \"unix\": null},\n"
                 " \"limits\": {\"memory_mib_max\": 8192, \"cpus_max\": 2.5, \"pids_max\": 1000,\n"
                 "   \"disk_mib_max\": 4096, \"timeout_s_max\": 600, \"output_max_bytes_max\": "
                 "1048576,\n"
                 "   \"max_body_bytes\": 33554432, \"max_sandboxes_per_tenant\": 8},\n"
                 " \"defaults\": {\"memory_mib\": 256, \"cpus\": 0.5, \"pids\": 64, \"disk_mib\": "
                 "128,\n"
                 "   \"timeout_s\": 10, \"output_max_bytes\": 4096},\n"
                 " \"env_allowlist\": [\"HTTP_PROXY\", \"LANG\"],\n"
                 " \"secrets\": {\"API_KEY\": {\"value\": \"" SECRET_VALUE "\"},\n"
                 "   \"DB_PASSWORD\": {\"file\": \"%s\"}, \"FROM_ENV\": {\"env\": "
                 "\"CODECAGE_TEST_SECRET\"}},\n"
                 " \"tenants\": [{\"name\": \"alice\", \"token\": \"" TOKEN_A "\"},\n"
                 "   {\"name\": \"bob\", \"token_file\": \"%s\"}],\n"
                 " \"mounts_allowed\": [{\"path\": \"%s\", \"writable\": true}],\n"
                 " \"retention_s\": 600, \"idle_timeout_s\": 1800,\n"
                 " \"audit_log\": \"%s/audit.jsonl\"}\n",
                 tmpdir, secret_file, token_file, data, tmpdir);
        write_file("full.json", json);

        struct cage_config *cfg = NULL;
        struct cage_error err = {0};
        CHECK(cage_config_load(cfgpath, &cfg, &err) == 0);
        if (!cfg) {
                fprintf(stderr, "  %s\n", err.message);
                return;
        }
        CHECK(cfg->limits.memory_mib_max == 8192 && cfg->limits.cpus_max == 2.5);
        CHECK(cfg->limits.max_body_bytes == 32 * 1024 * 1024);
        CHECK(cfg->defaults.cpus == 0.5 && cfg->defaults.timeout_s == 10);
        CHECK(cfg->listen_unix == NULL && !cfg->http_loopback);
        CHECK(cfg->retention_s == 600 && cfg->idle_timeout_s == 1800);
        CHECK(cage_config_env_allowed(cfg, "LANG") && !cage_config_env_allowed(cfg, "PATH"));
        CHECK(cage_config_auth_required(cfg));

        const char *v = NULL;
        CHECK(cage_config_secret(cfg, "API_KEY", &v, &err) == 0);
        CHECK_STREQ(v, SECRET_VALUE);
        CHECK(cage_config_secret(cfg, "DB_PASSWORD", &v, &err) == 0);
        CHECK_STREQ(v, "file-secret-value"); /* trailing newline stripped */
        CHECK(cage_config_secret(cfg, "FROM_ENV", &v, &err) == 0);
        CHECK_STREQ(v, "env-secret-value");

        const struct cage_tenant *t = cage_config_tenant_for_token(cfg, TOKEN_B);
        CHECK(t && strcmp(t->name, "bob") == 0); /* "\r\n" stripped from the file */
        cage_config_free(cfg);
        unsetenv("CODECAGE_TEST_SECRET");
}

TEST(unknown_keys_are_errors_naming_the_key)
{
        CHECK(refused_naming("{\"limts\": {}}", "limts: unknown key", "limits"));
        CHECK(refused_naming("{\"limits\": {\"memory_max\": 1}}", "limits.memory_max: unknown key",
                             "memory_mib_max"));
        CHECK(refused_naming("{\"listen\": {\"https\": \"127.0.0.1:1\"}}",
                             "listen.https: unknown key", NULL));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"tokn\": \"x\"}]}",
                             "tenants[0].tokn: unknown key", NULL));
        CHECK(refused_naming("{\"secrets\": {\"K\": {\"vaule\": \"" SECRET_VALUE "\"}}}",
                             "secrets.K.vaule: unknown key", NULL));
        CHECK(refused_naming("{\"mounts_allowed\": [{\"path\": \"/tmp\", \"rw\": true}]}",
                             "mounts_allowed[0].rw: unknown key", NULL));
        /* Duplicate keys could hide a weaker second value: refused too. */
        CHECK(refused_naming("{\"retention_s\": 1, \"retention_s\": 2}", "duplicate", NULL));
        CHECK(refused_naming("[]", "top level must be a JSON object", NULL));
}

TEST(parse_errors_never_quote_secret_values)
{
        CHECK(refused_naming("{\"secrets\": {\"K\": {\"value\": \"" SECRET_VALUE "\"",
                             "config:", NULL));
        CHECK(refused_naming("{\"secrets\": {\"K\": {\"value\": \"" SECRET_VALUE "\" \"x\"}}}",
                             "config:1:", NULL));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"token\": " TOKEN_A "}]}",
                             "config:1:", NULL));
        CHECK(refused_naming("{\"secrets\": {\"K\": {\"value\": \"" SECRET_VALUE "\"}, "
                             "\"K\": {\"value\": \"" SECRET_VALUE "\"}}}",
                             "duplicate", NULL));
}

TEST(limits_and_defaults_are_range_checked)
{
        CHECK(refused_naming("{\"limits\": {\"max_body_bytes\": 1048576}}",
                             "limits.max_body_bytes: 1048576 is out of range", "16777216.."));
        CHECK(refused_naming("{\"limits\": {\"pids_max\": \"many\"}}",
                             "limits.pids_max: must be an integer", NULL));
        CHECK(refused_naming("{\"limits\": {\"memory_mib_max\": 1.5}}",
                             "limits.memory_mib_max: must be an integer", NULL));
        CHECK(refused_naming("{\"limits\": {\"cpus_max\": 0}}", "limits.cpus_max", "0.01..1024"));
        CHECK(refused_naming("{\"limits\": {\"timeout_s_max\": -1}}", "limits.timeout_s_max",
                             NULL));
        CHECK(refused_naming("{\"limits\": {\"memory_mib_max\": 1024}, \"defaults\": "
                             "{\"memory_mib\": 2048}}",
                             "defaults.memory_mib: 2048 is above limits.memory_mib_max (1024)",
                             NULL));
        CHECK(refused_naming("{\"limits\": {\"cpus_max\": 2}, \"defaults\": {\"cpus\": 4}}",
                             "defaults.cpus", "limits.cpus_max"));
        CHECK(refused_naming("{\"defaults\": {\"timeout_s\": 7200}}",
                             "defaults.timeout_s: 7200 is above limits.timeout_s_max (3600)",
                             NULL));
        CHECK(refused_naming("{\"defaults\": {\"memory_mib\": 4}}", "defaults.memory_mib", NULL));
        CHECK(refused_naming("{\"retention_s\": -5}", "retention_s", NULL));
        CHECK(refused_naming("{\"defaults\": []}", "defaults: must be an object", NULL));

        /* A lowered limit pulls a built-in default down with it. */
        struct cage_config *cfg = NULL;
        char msg[CAGE_ERROR_MESSAGE_MAX];
        CHECK(parse("{\"limits\": {\"memory_mib_max\": 256, \"cpus_max\": 0.5, \"timeout_s_max\": "
                    "5}}",
                    &cfg, msg) == 0);
        CHECK(cfg && cfg->defaults.memory_mib == 256 && cfg->defaults.cpus == 0.5 &&
              cfg->defaults.timeout_s == 5);
        cage_config_free(cfg);
}

TEST(tenants_are_validated)
{
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"Alice\", \"token\": \"" TOKEN_A "\"}]}",
                             "tenants[0].name", "[a-z0-9]"));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"-x\", \"token\": \"" TOKEN_A "\"}]}",
                             "tenants[0].name", NULL));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"token\": \"short-token\"}]}",
                             "tenants[0].token", "16.."));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"token\": \"" TOKEN_A
                             " with space\"}]}",
                             "tenants[0].token", NULL));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\"}]}", "tenants[0]", "exactly one of"));
        CHECK(refused_naming("{\"tenants\": [{\"token\": \"" TOKEN_A "\"}]}", "tenants[0].name",
                             "required"));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"token\": \"" TOKEN_A "\"},"
                             "{\"name\": \"b\", \"token\": \"" TOKEN_A "\"}]}",
                             "tenants[1].token", "tenants[0]"));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"token\": \"" TOKEN_A "\"},"
                             "{\"name\": \"a\", \"token\": \"" TOKEN_B "\"}]}",
                             "tenants[1].name", "already used"));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"token_file\": "
                             "\"/nonexistent/codecage.token\"}]}",
                             "tenants[0].token_file", "No such file"));
        CHECK(refused_naming("{\"tenants\": {}}", "tenants: must be an array", NULL));
}

TEST(token_lookup)
{
        struct cage_config *cfg = NULL;
        char msg[CAGE_ERROR_MESSAGE_MAX];
        CHECK(parse("{\"tenants\": [{\"name\": \"alice\", \"token\": \"" TOKEN_A "\"},"
                    "{\"name\": \"bob\", \"token\": \"" TOKEN_B "==\"}]}",
                    &cfg, msg) == 0);
        if (!cfg)
                return;
        const struct cage_tenant *t = cage_config_tenant_for_token(cfg, TOKEN_A);
        CHECK(t && strcmp(t->name, "alice") == 0);
        t = cage_config_tenant_for_token(cfg, TOKEN_B "==");
        CHECK(t && strcmp(t->name, "bob") == 0);
        CHECK(cage_config_tenant_for_token(cfg, TOKEN_B) == NULL); /* a prefix */
        CHECK(cage_config_tenant_for_token(cfg, TOKEN_A "x") == NULL);
        CHECK(cage_config_tenant_for_token(cfg, "tokA_0123456789abcdeF") == NULL);
        CHECK(cage_config_tenant_for_token(cfg, "") == NULL);
        CHECK(cage_config_tenant_for_token(cfg, NULL) == NULL);
        CHECK(cage_config_tenant(cfg, "bob") == cage_config_tenant_for_token(cfg, TOKEN_B "=="));
        CHECK(cage_config_tenant(cfg, "carol") == NULL);
        cage_config_free(cfg);
}

TEST(listen_refuses_open_addresses_without_tokens)
{
        CHECK(refused_naming("{\"listen\": {\"http\": \"0.0.0.0:8080\"}}", "listen.http",
                             "not a loopback address"));
        CHECK(refused_naming("{\"listen\": {\"http\": \"[::]:8080\"}}", "listen.http",
                             "not a loopback address"));
        CHECK(refused_naming("{\"listen\": {\"http\": \"192.168.1.5:80\"}}", "listen.http", NULL));
        CHECK(refused_naming("{\"listen\": {\"http\": \"example.com:80\"}}", "listen.http",
                             "IPV4:PORT"));
        CHECK(refused_naming("{\"listen\": {\"http\": \"127.0.0.1\"}}", "listen.http", NULL));
        CHECK(refused_naming("{\"listen\": {\"http\": \"127.0.0.1:70000\"}}", "listen.http", NULL));
        CHECK(refused_naming("{\"listen\": {\"http\": null, \"unix\": null}}", "listen", NULL));
        CHECK(refused_naming("{\"listen\": {\"unix\": \"relative.sock\"}}", "listen.unix", NULL));
        CHECK(refused_naming("{\"listen\": {\"unix\": \"/tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                             "aaaaaaaaaaaa.sock\"}}",
                             "listen.unix", "longer than"));

        const char *ok[] = {
                "{\"listen\": {\"http\": \"127.0.0.1:9000\"}}",
                "{\"listen\": {\"http\": \"127.8.9.10:0\"}}",
                "{\"listen\": {\"http\": \"[::1]:9000\"}}",
                "{\"listen\": {\"http\": \"localhost:9000\"}}",
                "{\"listen\": {\"http\": null, \"unix\": \"/run/codecage.sock\"}}",
                "{\"listen\": {\"http\": \"0.0.0.0:8080\"}, \"tenants\": [{\"name\": \"a\", "
                "\"token\": \"" TOKEN_A "\"}]}",
        };
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                struct cage_config *cfg = NULL;
                char msg[CAGE_ERROR_MESSAGE_MAX];
                int r = parse(ok[i], &cfg, msg);
                if (r < 0)
                        fprintf(stderr, "  %s -> %s\n", ok[i], msg);
                CHECK(r == 0);
                cage_config_free(cfg);
        }
        struct cage_config *cfg = NULL;
        char msg[CAGE_ERROR_MESSAGE_MAX];
        CHECK(parse("{\"listen\": {\"http\": \"[::1]:9000\"}}", &cfg, msg) == 0);
        CHECK(cfg && cfg->http_loopback && cfg->http_addr.ss_family == AF_INET6);
        cage_config_free(cfg);
}

TEST(e2b_section)
{
        struct cage_config *cfg = NULL;
        char msg[CAGE_ERROR_MESSAGE_MAX];
        CHECK(parse("{}", &cfg, msg) == 0);
        CHECK(cfg && cfg->e2b.listen == NULL && cfg->e2b.timeout_s_max == 3600 &&
              cfg->e2b.internet_access);
        cage_config_free(cfg);
        cfg = NULL;
        CHECK(parse("{\"e2b\": {\"listen\": \"localhost:3000\", \"timeout_s_max\": 600, "
                    "\"internet_access\": false}}",
                    &cfg, msg) == 0);
        CHECK(cfg && strcmp(cfg->e2b.listen, "localhost:3000") == 0 && cfg->e2b.loopback &&
              cfg->e2b.addr.ss_family == AF_INET && cfg->e2b.timeout_s_max == 600 &&
              !cfg->e2b.internet_access);
        cage_config_free(cfg);
        cfg = NULL;
        /* An E2B API key's shape is a valid tenant token. */
        CHECK(parse("{\"e2b\": {\"listen\": \"0.0.0.0:3000\"}, \"tenants\": [{\"name\": \"a\", "
                    "\"token\": \"e2b_0123456789abcdef0123456789abcdef01234567\"}]}",
                    &cfg, msg) == 0);
        CHECK(cfg && !cfg->e2b.loopback &&
              cage_config_tenant_for_token(cfg, "e2b_0123456789abcdef0123456789abcdef01234567"));
        cage_config_free(cfg);
        CHECK(refused_naming("{\"e2b\": {\"listen\": \"0.0.0.0:3000\"}}", "e2b.listen",
                             "not a loopback address"));
        CHECK(refused_naming("{\"e2b\": {\"listen\": \"example.com:3000\"}}", "e2b.listen",
                             "IPV4:PORT"));
        CHECK(refused_naming("{\"e2b\": {\"timeout_s_max\": 0}}", "e2b.timeout_s_max", NULL));
        CHECK(refused_naming("{\"e2b\": {\"timeout_s_max\": 86401}}", "e2b.timeout_s_max", NULL));
        CHECK(refused_naming("{\"e2b\": {\"port\": 3000}}", "e2b.port: unknown key", NULL));
        CHECK(refused_naming("{\"e2b\": {\"internet_access\": \"no\"}}", "e2b.internet_access",
                             "true or false"));
}

TEST(secrets_are_resolved_at_load)
{
        char p[PATH_BUF], json[1024];
        CHECK(refused_naming("{\"secrets\": {\"api_key\": {\"value\": \"" SECRET_VALUE "\"}}}",
                             "secrets.api_key", "[A-Z_][A-Z0-9_]*"));
        CHECK(refused_naming("{\"secrets\": {\"K\": {\"value\": \"\"}}}", "secrets.K.value", NULL));
        CHECK(refused_naming("{\"secrets\": {\"K\": \"" SECRET_VALUE "\"}}", "secrets.K",
                             "must be an object"));
        CHECK(refused_naming("{\"secrets\": {\"K\": {\"value\": \"" SECRET_VALUE
                             "\", \"env\": \"X\"}}}",
                             "secrets.K", "exactly one"));
        unsetenv("CODECAGE_TEST_UNSET");
        CHECK(refused_naming("{\"secrets\": {\"K\": {\"env\": \"CODECAGE_TEST_UNSET\"}}}",
                             "secrets.K.env", "not set"));
        CHECK(refused_naming("{\"secrets\": {\"K\": {\"file\": \"/nonexistent/secret\"}}}",
                             "secrets.K.file", "No such file"));
        CHECK(refused_naming("{\"secrets\": {\"K\": {\"file\": \"relative/secret\"}}}",
                             "secrets.K.file", "absolute"));
        CHECK(refused_naming("{\"secrets\": {\"K\": {\"file\": \"/tmp\"}}}", "secrets.K.file",
                             "not a regular file"));

        /* A file over 64 KiB: the error names the secret, not the content. */
        tmp_path(p, sizeof(p), "big.secret");
        FILE *f = fopen(p, "we");
        for (int i = 0; f && i < 4000; i++)
                fputs(SECRET_VALUE, f);
        if (f)
                fclose(f);
        snprintf(json, sizeof(json), "{\"secrets\": {\"BIG\": {\"file\": \"%s\"}}}", p);
        CHECK(refused_naming(json, "secrets.BIG.file", "larger than 65536"));

        /* A symlink to a regular file is fine (Kubernetes mounts secrets so). */
        write_file("real.secret", SECRET_VALUE "\n");
        char real[PATH_BUF], link[PATH_BUF];
        tmp_path(real, sizeof(real), "real.secret");
        tmp_path(link, sizeof(link), "link.secret");
        CHECK(symlink(real, link) == 0);
        snprintf(json, sizeof(json), "{\"secrets\": {\"LINKED\": {\"file\": \"%s\"}}}", link);
        struct cage_config *cfg = NULL;
        char msg[CAGE_ERROR_MESSAGE_MAX];
        CHECK(parse(json, &cfg, msg) == 0);
        const char *v = NULL;
        struct cage_error err = {0};
        CHECK(cfg && cage_config_secret(cfg, "LINKED", &v, &err) == 0);
        CHECK_STREQ(v, SECRET_VALUE);

        /* Asking for an unknown secret names it. */
        CHECK(cfg && cage_config_secret(cfg, "NOPE", &v, &err) == -ENOENT);
        CHECK(strstr(err.message, "NOPE") != NULL);
        CHECK(strstr(err.message, SECRET_VALUE) == NULL);
        cage_config_free(cfg);

        /* An empty file is refused: an empty secret cannot be redacted. */
        write_file("empty.secret", "\n");
        tmp_path(p, sizeof(p), "empty.secret");
        snprintf(json, sizeof(json), "{\"secrets\": {\"E\": {\"file\": \"%s\"}}}", p);
        CHECK(refused_naming(json, "secrets.E", "empty"));
}

TEST(env_allowlist_is_validated)
{
        CHECK(refused_naming("{\"env_allowlist\": [\"OK\", \"NOT-OK\"]}", "env_allowlist[1]",
                             NULL));
        CHECK(refused_naming("{\"env_allowlist\": [1]}", "env_allowlist[0]", NULL));
        CHECK(refused_naming("{\"env_allowlist\": \"PATH\"}", "env_allowlist", "array"));
}

TEST(mount_allowlist)
{
        char data[PATH_BUF], data2[PATH_BUF], rw[PATH_BUF], sub[PATH_BUF], link[PATH_BUF];
        char p[256], json[2048];
        tmp_path(data, sizeof(data), "data");
        tmp_path(data2, sizeof(data2), "data2");
        tmp_path(rw, sizeof(rw), "data/rw");
        tmp_path(sub, sizeof(sub), "data/sub");
        tmp_path(link, sizeof(link), "data/escape");
        CHECK(mkdir(data2, 0700) == 0 && mkdir(rw, 0700) == 0 && mkdir(sub, 0700) == 0);
        CHECK(symlink(data2, link) == 0);
        snprintf(json, sizeof(json),
                 "{\"mounts_allowed\": [{\"path\": \"%s\"}, {\"path\": \"%s\", \"writable\": "
                 "true}]}",
                 data, rw);
        struct cage_config *cfg = NULL;
        char msg[CAGE_ERROR_MESSAGE_MAX];
        CHECK(parse(json, &cfg, msg) == 0);
        if (!cfg) {
                fprintf(stderr, "  %s\n", msg);
                return;
        }
        struct cage_error err = {0};
        char *resolved = NULL;
        CHECK(cage_config_mount_allowed(cfg, data, false, NULL, &err) == 0);
        CHECK(cage_config_mount_allowed(cfg, sub, false, &resolved, &err) == 0);
        char *want = realpath(sub, NULL);
        CHECK_STREQ(resolved, want);
        free(want);
        free(resolved);
        /* Read-only rule: no writable mount beneath it, except under rw. */
        CHECK(cage_config_mount_allowed(cfg, sub, true, NULL, &err) == -EPERM);
        CHECK(strstr(err.message, "read-only") != NULL);
        CHECK(cage_config_mount_allowed(cfg, rw, true, NULL, &err) == 0);
        /* A sibling sharing the prefix is not beneath. */
        CHECK(cage_config_mount_allowed(cfg, data2, false, NULL, &err) == -EPERM);
        CHECK(strstr(err.message, "mounts_allowed") != NULL);
        /* ".." is refused outright, even when it would land inside. */
        snprintf(p, sizeof(p), "%s/sub/../sub", data);
        CHECK(cage_config_mount_allowed(cfg, p, false, NULL, &err) == -EINVAL);
        snprintf(p, sizeof(p), "%s/../data2", data);
        CHECK(cage_config_mount_allowed(cfg, p, false, NULL, &err) == -EINVAL);
        CHECK(cage_config_mount_allowed(cfg, "relative/path", false, NULL, &err) == -EINVAL);
        /* A symlink inside that points outside is refused, and the message
         * does not reveal where it points. */
        CHECK(cage_config_mount_allowed(cfg, link, false, NULL, &err) == -EPERM);
        CHECK(strstr(err.message, "data2") == NULL);
        /* Beneath a rule but missing. */
        snprintf(p, sizeof(p), "%s/missing", data);
        CHECK(cage_config_mount_allowed(cfg, p, false, NULL, &err) == -ENOENT);
        /* Outside every rule: refused without looking at the filesystem. */
        CHECK(cage_config_mount_allowed(cfg, "/etc/shadow", false, NULL, &err) == -EPERM);
        CHECK(cage_config_mount_allowed(cfg, "/nonexistent", false, NULL, &err) == -EPERM);
        cage_config_free(cfg);

        CHECK(refused_naming("{\"mounts_allowed\": [{\"path\": \"/\"}]}", "mounts_allowed[0].path",
                             "whole host"));
        CHECK(refused_naming("{\"mounts_allowed\": [{\"path\": \"/nonexistent/dir\"}]}",
                             "mounts_allowed[0].path", "No such file"));
        CHECK(refused_naming("{\"mounts_allowed\": [{\"path\": \"/tmp/../etc\"}]}",
                             "mounts_allowed[0].path", NULL));
        CHECK(refused_naming("{\"mounts_allowed\": [{\"path\": \"/tmp\", \"writable\": 1}]}",
                             "mounts_allowed[0].writable", NULL));
}

TEST(config_files_are_bounded)
{
        char p[PATH_BUF];
        struct cage_config *cfg = NULL;
        struct cage_error err = {0};
        tmp_path(p, sizeof(p), "huge.json");
        FILE *f = fopen(p, "we");
        if (f) {
                fputs("{\"data_dir\": \"/", f);
                for (int i = 0; i < 1100 * 1024; i++)
                        fputc('a', f);
                fputs("\"}", f);
                fclose(f);
        }
        CHECK(cage_config_load(p, &cfg, &err) == -EINVAL);
        CHECK(strstr(err.message, "larger than 1048576") != NULL);
        CHECK(cage_config_load("/nonexistent/codecage.json", &cfg, &err) == -ENOENT);
        CHECK(strstr(err.message, "/nonexistent/codecage.json") != NULL);
        CHECK(refused_naming("{\"data_dir\": \"relative\"}", "data_dir", NULL));
        CHECK(refused_naming("{\"audit_log\": \"/var/log/../x\"}", "audit_log", NULL));
        CHECK(refused_naming("{\"data_dir\": 5}", "data_dir: must be a string", NULL));
}

TEST(redactor_covers_secrets_and_tokens)
{
        struct cage_config *cfg = NULL;
        char msg[CAGE_ERROR_MESSAGE_MAX];
        CHECK(parse("{\"secrets\": {\"API_KEY\": {\"value\": \"" SECRET_VALUE "\"}},"
                    "\"tenants\": [{\"name\": \"alice\", \"token\": \"" TOKEN_A "\"}]}",
                    &cfg, msg) == 0);
        struct cage_redactor *red = NULL;
        struct cage_error err = {0};
        CHECK(cfg && cage_config_redactor(cfg, &red, &err) == 0);
        const char *in = "k=" SECRET_VALUE " t=" TOKEN_A;
        char *out = NULL;
        size_t n = 0;
        CHECK(cage_redact(red, in, strlen(in), &out, &n) == 0);
        CHECK_STREQ(out, "k=[REDACTED:API_KEY] t=[REDACTED:token:alice]");
        free(out);
        cage_redactor_unref(red);
        cage_config_free(cfg);
}

TEST(network_defaults_allow_names_not_private_addresses)
{
        char msg[CAGE_ERROR_MESSAGE_MAX];
        struct cage_config *cfg = NULL;
        CHECK(parse("{}", &cfg, msg) == 0);
        if (!cfg)
                return;
        CHECK(cfg->network.allow.n == 1 && cfg->network.allow.rules[0].kind == EGRESS_RULE_ANY);
        CHECK(cfg->network.allow_private.n == 0);
        CHECK(cfg->network.max_connections == 16 && cfg->network.max_bytes == 1ULL << 30);
        CHECK_STREQ(cfg->pip.index_url, "https://pypi.org/simple");
        CHECK(cfg->pip.trusted_host == NULL);
        /* The public index keeps its files on another host. */
        CHECK(cfg->pip.hosts.n == 2);
        if (cfg->pip.hosts.n == 2) {
                CHECK_STREQ(cfg->pip.hosts.rules[0].host, "pypi.org");
                CHECK_STREQ(cfg->pip.hosts.rules[1].host, "files.pythonhosted.org");
        }
        CHECK(cfg->fetch.max_redirects == 5 && cfg->fetch.max_bytes == 100ULL << 20);
        cage_config_free(cfg);
}

TEST(network_sections_are_validated)
{
        char msg[CAGE_ERROR_MESSAGE_MAX];
        struct cage_config *cfg = NULL;
        CHECK(parse("{\"network\": {\"allow\": [\"*.example.com\", \"10.0.0.0/8:8080\"], "
                    "\"allow_private\": [\"127.0.0.1/32\"], \"max_connections\": 2}, "
                    "\"pip\": {\"index_url\": \"http://mirror.internal:3141/simple\"}}",
                    &cfg, msg) == 0);
        if (cfg) {
                CHECK(cfg->network.allow.n == 2 && cfg->network.max_connections == 2);
                CHECK_STREQ(cfg->pip.trusted_host, "mirror.internal:3141");
                CHECK(cfg->pip.hosts.n == 1 && cfg->pip.hosts.rules[0].port == 3141);
                cage_config_free(cfg);
        }
        CHECK(refused_naming("{\"network\": {\"allow\": [\"*.\"]}}", "network.allow[0]", NULL));
        CHECK(refused_naming("{\"network\": {\"allow\": \"*\"}}", "network.allow", NULL));
        CHECK(refused_naming("{\"network\": {\"allow_private\": [\"example.com\"]}}",
                             "network.allow_private[0]", NULL));
        CHECK(refused_naming("{\"network\": {\"allow_private\": [\"10.0.0.0/8:80\"]}}",
                             "network.allow_private[0]", NULL));
        CHECK(refused_naming("{\"network\": {\"max_connections\": 0}}", "network.max_connections",
                             NULL));
        CHECK(refused_naming("{\"network\": {\"proxy\": 1}}", "network.proxy", NULL));
        CHECK(refused_naming("{\"pip\": {\"index_url\": \"ftp://x/simple\"}}", "pip.index_url",
                             NULL));
        CHECK(refused_naming("{\"pip\": {\"index_url\": \"https://u:p@x/simple\"}}",
                             "pip.index_url", NULL));
        CHECK(refused_naming("{\"fetch\": {\"max_redirects\": 21}}", "fetch.max_redirects", NULL));
}

TEST(tenant_rights)
{
        char msg[CAGE_ERROR_MESSAGE_MAX];
        struct cage_config *cfg = NULL;
        CHECK(parse("{\"secrets\": {\"A\": {\"value\": \"" SECRET_VALUE "\"}, "
                    "\"B\": {\"value\": \"bbbbbbbbbbbbbbbb\"}},"
                    " \"tenants\": [{\"name\": \"alice\", \"token\": \"" TOKEN_A "\","
                    " \"secrets\": [\"A\"], \"operator\": true},"
                    " {\"name\": \"bob\", \"token\": \"" TOKEN_B "\", \"secrets\": []},"
                    " {\"name\": \"carol\", \"token\": \"tokC_0123456789abcdef\"}]}",
                    &cfg, msg) == 0);
        if (cfg) {
                CHECK(cage_config_tenant_may_use_secret(cfg, "alice", "A"));
                CHECK(!cage_config_tenant_may_use_secret(cfg, "alice", "B"));
                CHECK(!cage_config_tenant_may_use_secret(cfg, "bob", "A"));
                CHECK(cage_config_tenant_may_use_secret(cfg, "carol", "B")); /* none listed */
                CHECK(!cage_config_tenant_may_use_secret(cfg, "mallory", "A"));
                CHECK(cage_config_tenant(cfg, "alice")->operator);
                CHECK(!cage_config_tenant(cfg, "bob")->operator);
                cage_config_free(cfg);
        }
        CHECK(parse("{\"secrets\": {\"A\": {\"value\": \"" SECRET_VALUE "\"}}}", &cfg, msg) == 0);
        if (cfg) { /* without tenants, the one tenant may use every secret */
                CHECK(cage_config_tenant_may_use_secret(cfg, "default", "A"));
                cage_config_free(cfg);
        }
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"token\": \"" TOKEN_A "\","
                             " \"secrets\": [\"NOPE\"]}]}",
                             "tenants[0].secrets[0]", "NOPE"));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"token\": \"" TOKEN_A "\","
                             " \"secrets\": \"A\"}]}",
                             "tenants[0].secrets", NULL));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"token\": \"" TOKEN_A "\","
                             " \"operator\": 1}]}",
                             "tenants[0].operator", NULL));
}

TEST(quotas_and_operations)
{
        char msg[CAGE_ERROR_MESSAGE_MAX];
        struct cage_config *cfg = NULL;
        CHECK(parse("{}", &cfg, msg) == 0);
        if (cfg) { /* no quota, no metrics listener, a 30 s drain, at least 4 launches */
                const struct cage_quotas *q = cage_config_quotas(cfg, "default");
                CHECK(q->runs == 0 && q->sessions == 0 && q->sandboxes_running == 0 &&
                      q->memory_mib == 0);
                CHECK(q->artifacts_mib == 1024); /* kept artifacts: a cap by default */
                CHECK(!cfg->listen_metrics);
                CHECK(cfg->connections_per_ip == CAGE_CONFIG_CONNECTIONS_PER_IP_DEFAULT);
                CHECK(cfg->drain_timeout_s == 30);
                CHECK(cfg->limits.launches_max >= 4);
                cage_config_free(cfg);
        }
        CHECK(parse("{\"quotas\": {\"runs\": 4, \"memory_mib\": 2048},"
                    " \"tenants\": [{\"name\": \"a\", \"token\": \"" TOKEN_A "\","
                    " \"quotas\": {\"runs\": 1, \"sessions\": 2, \"artifacts_mib\": 0}},"
                    " {\"name\": \"b\", \"token\": \"" TOKEN_B "\"}],"
                    " \"listen\": {\"metrics\": \"127.0.0.1:9464\", \"connections_per_ip\": 0},"
                    " \"limits\": {\"launches_max\": 2}, \"drain_timeout_s\": 5}",
                    &cfg, msg) == 0);
        if (cfg) { /* a tenant's own keys replace the server's, the rest are inherited */
                const struct cage_quotas *a = cage_config_quotas(cfg, "a");
                const struct cage_quotas *b = cage_config_quotas(cfg, "b");
                CHECK(a->runs == 1 && a->sessions == 2 && a->memory_mib == 2048);
                CHECK(b->runs == 4 && b->sessions == 0 && b->memory_mib == 2048);
                CHECK(a->artifacts_mib == 0 && b->artifacts_mib == 1024);
                CHECK(cage_config_quotas(cfg, "nobody")->runs == 4);
                CHECK(cfg->listen_metrics && strcmp(cfg->listen_metrics, "127.0.0.1:9464") == 0);
                CHECK(cfg->connections_per_ip == 0); /* no limit */
                CHECK(cfg->limits.launches_max == 2 && cfg->drain_timeout_s == 5);
                cage_config_free(cfg);
        }
        CHECK(refused_naming("{\"quotas\": {\"runz\": 1}}", "quotas", "runz"));
        CHECK(refused_naming("{\"quotas\": {\"runs\": -1}}", "quotas.runs", NULL));
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"token\": \"" TOKEN_A "\","
                             " \"quotas\": {\"sessions\": 1.5}}]}",
                             "tenants[0].quotas.sessions", NULL));
        /* The metrics listener asks for no token: loopback only, even with tenants. */
        CHECK(refused_naming("{\"tenants\": [{\"name\": \"a\", \"token\": \"" TOKEN_A "\"}],"
                             " \"listen\": {\"metrics\": \"0.0.0.0:9464\"}}",
                             "listen.metrics", "loopback"));
        CHECK(refused_naming("{\"listen\": {\"metrics\": \"nowhere\"}}", "listen.metrics", NULL));
        CHECK(refused_naming("{\"listen\": {\"connections_per_ip\": 257}}",
                             "listen.connections_per_ip", NULL));
        CHECK(refused_naming("{\"limits\": {\"launches_max\": 0}}", "limits.launches_max", NULL));
        CHECK(refused_naming("{\"drain_timeout_s\": 99999}", "drain_timeout_s", NULL));
}

RUN_TESTS(T(defaults_are_secure_and_valid), T(a_full_config_loads_from_a_file),
          T(unknown_keys_are_errors_naming_the_key), T(parse_errors_never_quote_secret_values),
          T(limits_and_defaults_are_range_checked), T(tenants_are_validated), T(token_lookup),
          T(listen_refuses_open_addresses_without_tokens), T(e2b_section),
          T(secrets_are_resolved_at_load), T(env_allowlist_is_validated), T(mount_allowlist),
          T(config_files_are_bounded), T(redactor_covers_secrets_and_tokens),
          T(network_defaults_allow_names_not_private_addresses), T(network_sections_are_validated),
          T(tenant_rights), T(quotas_and_operations))
