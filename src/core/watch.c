/* The watch loop of a running program; see watch.h. */
#include "watch.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "util/clock.h"
#include "util/fdutil.h"

#define CPU_POLL_MS    50 /* how often a CPU budget is checked */
#define POLL_MAX_MS    60000
#define DRAIN_MS       2000 /* bound on reading pipes after the kill */
#define READS_PER_WAKE 16
#define WATCH_FDS_MAX  8

void watch_init(struct watch *w, const struct cage_run_options *opts)
{
        static const struct cage_run_options defaults = {.keep_output = true, .cancel_fd = -1};
        *w = (struct watch){.opts = opts ? opts : &defaults, .out_r = -1, .err_r = -1, .in_w = -1};
}

int watch_capture(struct watch *w, uint64_t output_max_bytes)
{
        uint64_t cap = w->opts->keep_output ? output_max_bytes : 0;
        int r = output_capture_init(&w->cap_out, cap);
        return r < 0 ? r : output_capture_init(&w->cap_err, cap);
}

void watch_start_clock(struct watch *w, uint64_t timeout_ms)
{
        w->timeout_ms = timeout_ms;
        w->deadline_ns = clock_mono_ns() + timeout_ms * 1000000ULL;
}

bool watch_tripped(const struct watch *w)
{
        return w->timed_out || w->cpu_exceeded || w->cancelled || w->flooded;
}

static void deliver(struct watch *w, int stream, const char *buf, size_t len)
{
        output_capture_feed(stream == 1 ? &w->cap_out : &w->cap_err, buf, len);
        if (w->opts->on_output && w->opts->on_output(w->opts->on_output_ctx, stream, buf, len))
                w->cancelled = true;
        uint64_t stop = w->output_stop_bytes;
        if (stop && w->cap_out.total + w->cap_err.total > stop)
                w->flooded = true;
}

static void read_stream(struct watch *w, int *fd, int stream)
{
        char buf[65536];
        for (int i = 0; i < READS_PER_WAKE && !w->flooded; i++) {
                ssize_t n = read(*fd, buf, sizeof(buf));
                if (n > 0) {
                        deliver(w, stream, buf, (size_t)n);
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n == 0 || errno != EAGAIN)
                        close_fd(fd);
                return;
        }
}

static void feed_stdin(struct watch *w)
{
        while (w->in_left > 0) {
                ssize_t n = write(w->in_w, w->in_data, w->in_left);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0)
                        break; /* the program closed its stdin: fine */
                w->in_data += n;
                w->in_left -= (size_t)n;
        }
        close_fd(&w->in_w);
}

static bool cpu_over_budget(const struct watch *w)
{
        struct cgroup_stats s = {0};
        if (!w->cpu_time_ms || !w->cpu_cg || cage_cgroup_stats(w->cpu_cg, &s) < 0)
                return false;
        return s.cpu_usage_ns / 1000000ULL >= w->cpu_time_ms;
}

static int poll_timeout_ms(const struct watch *w)
{
        uint64_t now = clock_mono_ns();
        if (now >= w->deadline_ns)
                return 0;
        uint64_t ms = (w->deadline_ns - now + 999999) / 1000000;
        if (w->cpu_time_ms && ms > CPU_POLL_MS)
                ms = CPU_POLL_MS;
        return ms > POLL_MAX_MS ? POLL_MAX_MS : (int)ms;
}

/* Fills p with the streams, stdin, the cancel fd and the extras. */
static size_t fill(const struct watch *w, const struct watch_fd *extra, size_t n_extra,
                   struct pollfd *p)
{
        p[0] = (struct pollfd){.fd = w->out_r, .events = POLLIN};
        p[1] = (struct pollfd){.fd = w->err_r, .events = POLLIN};
        p[2] = (struct pollfd){.fd = w->in_w, .events = POLLOUT};
        p[3] = (struct pollfd){.fd = w->opts->cancel_fd, .events = POLLIN};
        size_t n = 4;
        for (size_t i = 0; i < n_extra && n < WATCH_FDS_MAX; i++)
                p[n++] = (struct pollfd){.fd = *extra[i].fd, .events = POLLIN};
        return n;
}

static void dispatch(struct watch *w, const struct watch_fd *extra, const struct pollfd *p,
                     size_t n, void *ctx)
{
        if (p[0].revents)
                read_stream(w, &w->out_r, 1);
        if (p[1].revents)
                read_stream(w, &w->err_r, 2);
        if (p[2].revents)
                feed_stdin(w);
        if (p[3].revents)
                w->cancelled = true;
        for (size_t i = 4; i < n; i++)
                if (p[i].revents && *extra[i - 4].fd >= 0)
                        extra[i - 4].ready(ctx);
}

void watch_loop(struct watch *w, const struct watch_fd *extra, size_t n_extra,
                bool (*done)(void *ctx), void *ctx)
{
        struct pollfd p[WATCH_FDS_MAX];
        while (!done(ctx) && !watch_tripped(w)) {
                size_t n = fill(w, extra, n_extra, p);
                if (poll(p, n, poll_timeout_ms(w)) < 0 && errno != EINTR)
                        break;
                dispatch(w, extra, p, n, ctx);
                if (done(ctx))
                        break;
                if (clock_mono_ns() >= w->deadline_ns)
                        w->timed_out = true;
                else if (cpu_over_budget(w))
                        w->cpu_exceeded = true;
        }
}

void watch_drain(struct watch *w, const struct watch_fd *extra, size_t n_extra, void *ctx)
{
        close_fd(&w->in_w);
        /* Past the output stop, more would only grow with the machine's
         * speed: the program's next write fails, if it lives to make one. */
        if (w->flooded) {
                close_fd(&w->out_r);
                close_fd(&w->err_r);
        }
        uint64_t until = clock_mono_ns() + DRAIN_MS * 1000000ULL;
        while ((w->out_r >= 0 || w->err_r >= 0) && clock_mono_ns() < until) {
                struct pollfd p[2] = {{.fd = w->out_r, .events = POLLIN},
                                      {.fd = w->err_r, .events = POLLIN}};
                if (poll(p, 2, 100) < 0 && errno != EINTR)
                        break;
                if (p[0].revents)
                        read_stream(w, &w->out_r, 1);
                if (p[1].revents)
                        read_stream(w, &w->err_r, 2);
        }
        /* What the report or status pipes already hold (an exit record). */
        for (size_t i = 0; i < n_extra; i++) {
                struct pollfd p = {.fd = *extra[i].fd, .events = POLLIN};
                while (p.fd >= 0 && poll(&p, 1, 0) == 1) {
                        extra[i].ready(ctx);
                        p.fd = *extra[i].fd;
                }
        }
}

void watch_note(struct watch *w, const char *line)
{
        deliver(w, 2, line, strlen(line));
}

int watch_finish(struct watch *w, struct cage_result *res)
{
        int r = output_capture_finish(&w->cap_out, &res->out);
        return r < 0 ? r : output_capture_finish(&w->cap_err, &res->err);
}

void watch_free(struct watch *w)
{
        close_fd(&w->out_r);
        close_fd(&w->err_r);
        close_fd(&w->in_w);
        output_capture_free(&w->cap_out);
        output_capture_free(&w->cap_err);
}
