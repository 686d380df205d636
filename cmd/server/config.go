package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
)

// Config is the server's whole configuration, from flags whose defaults come
// from LATCHKEY_* environment variables.
type Config struct {
	Addr            string
	RedisURL        string
	RedisTimeout    time.Duration
	RedisCluster    bool
	ShutdownTimeout time.Duration
	LogLevel        slog.Level
	AdminKey        string
	Dev             bool
	KeyPrefix       string
	DefaultTTL      time.Duration
	MaxTTL          time.Duration
	MaxBodyBytes    int64
	RedisPipeline   bool
	PprofAddr       string
	GRPC            GRPCFlags
	RedisMaxQueued  int
	MaxWait         time.Duration
	HoldPing        time.Duration
	Watch           WatchFlags
	MaxHold         time.Duration // default max_hold of a keep-alive lease
	MaxHoldCap      time.Duration // largest max_hold a request may ask for
	FenceRetention  time.Duration // how long a lock name's fence counter outlives its last lease
	RenewParallel   int           // keep-alive renewal script calls in flight per instance
	MinReplicas     int           // replicas that must have a lock change before it is reported
	ReplicaTimeout  time.Duration // how long a lock change waits for them

	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration

	RateLimit RateLimitFlags
	Auth      AuthFlags

	// HealthCheck makes the process probe /healthz of the server at Addr and
	// exit instead of serving (for container HEALTHCHECKs: no shell or curl needed).
	HealthCheck bool
	// Version makes the process print its version and exit.
	Version bool
}

// maxRenewParallel bounds -renew-parallel: past a few dozen calls in flight
// the renewer's batches only queue behind each other in Redis.
const maxRenewParallel = 64

// envFlags registers flags whose defaults come from the environment and
// remembers which environment values could not be parsed.
type envFlags struct {
	fs     *flag.FlagSet
	getenv func(string) string
	errs   []error
}

func (e *envFlags) str(p *string, name, env, def, usage string) {
	e.fs.StringVar(p, name, fromEnv(e, env, def, func(v string) (string, error) { return v, nil }, ""), usage+" ("+env+")")
}

func (e *envFlags) dur(p *time.Duration, name, env string, def time.Duration, usage string) {
	e.fs.DurationVar(p, name, fromEnv(e, env, def, time.ParseDuration, "a duration such as 5s or 250ms"), usage+" ("+env+")")
}

func (e *envFlags) boolean(p *bool, name, env string, def bool, usage string) {
	e.fs.BoolVar(p, name, fromEnv(e, env, def, strconv.ParseBool, "true or false"), usage+" ("+env+")")
}

func (e *envFlags) int64(p *int64, name, env string, def int64, usage string) {
	parse := func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) }
	e.fs.Int64Var(p, name, fromEnv(e, env, def, parse, "a whole number"), usage+" ("+env+")")
}

func (e *envFlags) integer(p *int, name, env string, def int, usage string) {
	e.fs.IntVar(p, name, fromEnv(e, env, def, strconv.Atoi, "a whole number"), usage+" ("+env+")")
}

// fromEnv is a flag's default: env's value parsed by parse, or def when env
// is empty. A value that does not parse is remembered as an error saying it
// is not want, and def stays the default.
func fromEnv[T any](e *envFlags, env string, def T, parse func(string) (T, error), want string) T {
	v := e.getenv(env)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q is not %s", env, v, want))
		return def
	}
	return x
}

// parseConfig reads flags from args with environment defaults and validates
// the result. With -h it writes the usage to out and returns flag.ErrHelp;
// errors are only returned, never written, so that the caller prints them
// last instead of above the usage.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	var c Config
	var logLevel string
	fs := flag.NewFlagSet(programName, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e := &envFlags{fs: fs, getenv: getenv}
	sd, ld := store.DefaultConfig(), locks.DefaultConfig()
	e.str(&c.Addr, "addr", "LATCHKEY_ADDR", "127.0.0.1:8080", "listen address")
	e.str(&c.RedisURL, "redis-url", "LATCHKEY_REDIS_URL", "", "Redis URL (redis://, rediss://, unix://; with ?master_name=NAME the address is a Sentinel's); empty runs on the embedded in-memory store")
	e.boolean(&c.RedisCluster, "redis-cluster", "LATCHKEY_REDIS_CLUSTER", false, "serve -redis-url as a Redis Cluster's seed nodes (redis://node-1:6379?addr=node-2:6379...); without it a URL naming one cluster node is detected (INFO cluster)")
	e.dur(&c.RedisTimeout, "redis-timeout", "LATCHKEY_REDIS_TIMEOUT", sd.OpTimeout, "bound on every Redis call; past it a request gets 503")
	e.integer(&c.MinReplicas, "redis-min-replicas", "LATCHKEY_REDIS_MIN_REPLICAS", 0, "replicas that must have a grant, release or renewal (Redis WAIT) before it is reported; fewer in time is a 503; 0: off")
	e.dur(&c.ReplicaTimeout, "redis-replica-timeout", "LATCHKEY_REDIS_REPLICA_TIMEOUT", sd.ReplicaTimeout, "how long a lock change waits for -redis-min-replicas; below -redis-timeout")
	e.dur(&c.ShutdownTimeout, "shutdown-timeout", "LATCHKEY_SHUTDOWN_TIMEOUT", 15*time.Second, "how long shutdown waits for in-flight requests")
	e.str(&logLevel, "log-level", "LATCHKEY_LOG_LEVEL", "info", "debug, info, warn or error")
	e.str(&c.AdminKey, "admin-key", "LATCHKEY_ADMIN_KEY", "", "bearer credential for admin actions (force-release); empty disables them")
	e.boolean(&c.Dev, "dev", "LATCHKEY_DEV", false, "allow the embedded store on a non-loopback address")
	e.str(&c.KeyPrefix, "key-prefix", "LATCHKEY_KEY_PREFIX", sd.KeyPrefix, "prefix of every Redis key")
	e.dur(&c.DefaultTTL, "default-ttl", "LATCHKEY_DEFAULT_TTL", ld.DefaultTTL, "lease TTL when a request gives none")
	e.dur(&c.MaxTTL, "max-ttl", "LATCHKEY_MAX_TTL", ld.MaxTTL, "largest lease TTL a request may ask for")
	e.boolean(&c.RedisPipeline, "redis-pipeline", "LATCHKEY_REDIS_PIPELINE", true, "send concurrent requests' scripts to Redis together: lock scripts as pipelines (not on a Redis Cluster), rate-limit decisions as one script call per batch (per hash slot on a cluster)")
	e.integer(&c.RedisMaxQueued, "redis-max-queued", "LATCHKEY_REDIS_MAX_QUEUED", ratelimit.DefaultConfig().MaxQueued, "scripts that may wait for a pipeline, and rate-limit decisions of each algorithm that may wait for a batch; past it requests get 503")
	e.dur(&c.MaxHold, "max-hold", "LATCHKEY_MAX_HOLD", ld.DefaultMaxHold, "max_hold of a keep-alive lease that names none")
	e.dur(&c.MaxHoldCap, "max-hold-cap", "LATCHKEY_MAX_HOLD_CAP", ld.MaxHoldCap, "largest max_hold a keep-alive lease may ask for (400 above)")
	e.dur(&c.FenceRetention, "fence-retention", "LATCHKEY_FENCE_RETENTION", ld.FenceTTL, "how long a lock name's fence counter (a semaphore's capacity) and other keys are kept after its last lease ends; fences increase as long as Redis's clock never steps back by more")
	e.integer(&c.RenewParallel, "renew-parallel", "LATCHKEY_RENEW_PARALLEL", ld.RenewParallel, "keep-alive renewal script calls (100 leases each) this instance keeps in flight at once")
	c.GRPC.register(e)
	e.str(&c.PprofAddr, "pprof-addr", "LATCHKEY_PPROF_ADDR", "", "serve Go profiling endpoints (/debug/pprof/) on this loopback address; empty: off")
	e.int64(&c.MaxBodyBytes, "max-body-bytes", "LATCHKEY_MAX_BODY_BYTES", 64<<10, "largest request body accepted (413 above)")
	e.dur(&c.MaxWait, "max-wait", "LATCHKEY_MAX_WAIT", ld.MaxWait, "longest wait an acquire or hold may ask for; must be below -write-timeout")
	e.dur(&c.HoldPing, "hold-ping", "LATCHKEY_HOLD_PING", 15*time.Second, "interval of keep-alive comments on an idle hold stream")
	e.dur(&c.Watch.Ping, "watch-ping", "LATCHKEY_WATCH_PING", 15*time.Second, "interval of keep-alive comments on an idle watch stream")
	e.dur(&c.Watch.Resync, "watch-resync", "LATCHKEY_WATCH_RESYNC", ld.WatchResync, "how often a watched name's state is read again without a message, healing a missed one")
	e.integer(&c.Watch.MaxStreams, "watch-max-streams", "LATCHKEY_WATCH_MAX_STREAMS", 10000, "watch streams this instance serves at once (503 watch-streams-exhausted above)")
	e.integer(&c.Watch.MaxPerClient, "watch-max-streams-per-client", "LATCHKEY_WATCH_MAX_STREAMS_PER_CLIENT", 100, "watch streams one API key (or client address on an open API) has open on this instance (429 watch-streams-per-client above)")
	e.dur(&c.ReadHeaderTimeout, "read-header-timeout", "LATCHKEY_READ_HEADER_TIMEOUT", 5*time.Second, "HTTP read-header timeout")
	e.dur(&c.ReadTimeout, "read-timeout", "LATCHKEY_READ_TIMEOUT", 30*time.Second, "HTTP read timeout")
	e.dur(&c.WriteTimeout, "write-timeout", "LATCHKEY_WRITE_TIMEOUT", 90*time.Second, "HTTP write timeout")
	e.dur(&c.IdleTimeout, "idle-timeout", "LATCHKEY_IDLE_TIMEOUT", 120*time.Second, "HTTP keep-alive idle timeout")
	c.RateLimit.register(e)
	c.Auth.register(e)
	fs.BoolVar(&c.HealthCheck, "healthcheck", false, "probe /healthz of the server at -addr, exit 0 if it answers 200, 1 otherwise")
	fs.BoolVar(&c.Version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(out, "Usage: %s [flags]\n\nThe Latchkey server. Each flag's default comes from the LATCHKEY_* environment variable named after it.\n\n", programName)
			fs.SetOutput(out)
			fs.PrintDefaults()
			return Config{}, err
		}
		return Config{}, usageError(err)
	}
	if c.Version {
		return c, nil
	}
	if err := errors.Join(e.errs...); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, usageError(fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	if err := c.LogLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return Config{}, fmt.Errorf("log level %q: want debug, info, warn or error", logLevel)
	}
	return c, c.Validate()
}

// usageError is err, a command line that cannot be parsed: it points to -h
// and is errUsage.
func usageError(err error) error { return cmdLineError{err} }

type cmdLineError struct{ err error }

func (e cmdLineError) Error() string {
	return fmt.Sprintf("%v (%s -h lists the flags)", e.err, programName)
}
func (e cmdLineError) Unwrap() error        { return e.err }
func (e cmdLineError) Is(target error) bool { return target == errUsage }

// Validate reports every setting that cannot work, each named by its flag.
func (c Config) Validate() error {
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("-addr %q: want host:port, e.g. 127.0.0.1:8080 or :8080", c.Addr))
	}
	if c.RedisURL != "" {
		if err := checkRedisURL(c.RedisURL, c.RedisCluster); err != nil {
			errs = append(errs, fmt.Errorf("-redis-url: %w", err))
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"-redis-timeout", c.RedisTimeout}, {"-shutdown-timeout", c.ShutdownTimeout},
		{"-default-ttl", c.DefaultTTL}, {"-max-ttl", c.MaxTTL},
		{"-read-header-timeout", c.ReadHeaderTimeout}, {"-read-timeout", c.ReadTimeout},
		{"-write-timeout", c.WriteTimeout}, {"-idle-timeout", c.IdleTimeout},
	} {
		check(d.v <= 0, "%s must be positive, got %s", d.flag, d.v)
	}
	check(c.DefaultTTL > c.MaxTTL, "-default-ttl %s is above -max-ttl %s", c.DefaultTTL, c.MaxTTL)
	check(c.PprofAddr != "" && !isLoopback(c.PprofAddr), "-pprof-addr %q must be a loopback address such as 127.0.0.1:6060", c.PprofAddr)
	check(c.RedisMaxQueued < 1, "-redis-max-queued must be at least 1, got %d", c.RedisMaxQueued)
	check(c.MaxWait <= 0, "-max-wait must be positive, got %s", c.MaxWait)
	check(c.MaxWait > 0 && c.WriteTimeout > 0 && c.MaxWait+c.RedisTimeout >= c.WriteTimeout,
		"-max-wait %s plus -redis-timeout %s must be below -write-timeout %s, so a wait ends with an answer",
		c.MaxWait, c.RedisTimeout, c.WriteTimeout)
	check(c.MinReplicas < 0, "-redis-min-replicas must not be negative, got %d", c.MinReplicas)
	check(c.MinReplicas > 0 && (c.ReplicaTimeout <= 0 || c.ReplicaTimeout >= c.RedisTimeout),
		"-redis-replica-timeout %s must be positive and below -redis-timeout %s", c.ReplicaTimeout, c.RedisTimeout)
	check(c.MinReplicas > 0 && c.RedisURL == "", "-redis-min-replicas needs -redis-url: the embedded store has no replicas")
	check(c.RedisCluster && c.RedisURL == "", "-redis-cluster needs -redis-url: the embedded store is no cluster")
	check(c.HoldPing <= 0, "-hold-ping must be positive, got %s", c.HoldPing)
	check(c.Watch.Ping <= 0 || c.Watch.Resync <= 0, "-watch-ping and -watch-resync must be positive, got %s and %s", c.Watch.Ping, c.Watch.Resync)
	check(c.Watch.MaxStreams <= 0 || c.Watch.MaxPerClient <= 0, "-watch-max-streams and -watch-max-streams-per-client must be positive, got %d and %d",
		c.Watch.MaxStreams, c.Watch.MaxPerClient)
	check(c.MaxHold <= 0 || c.MaxHoldCap <= 0, "-max-hold and -max-hold-cap must be positive, got %s and %s", c.MaxHold, c.MaxHoldCap)
	check(c.MaxHold > c.MaxHoldCap, "-max-hold %s is above -max-hold-cap %s", c.MaxHold, c.MaxHoldCap)
	check(c.FenceRetention <= 0, "-fence-retention must be positive, got %s", c.FenceRetention)
	check(c.RenewParallel < 1 || c.RenewParallel > maxRenewParallel,
		"-renew-parallel must be between 1 and %d, got %d", maxRenewParallel, c.RenewParallel)
	check(c.MaxBodyBytes < 1024, "-max-body-bytes must be at least 1024, got %d", c.MaxBodyBytes)
	check(c.KeyPrefix == "" || strings.ContainsAny(c.KeyPrefix, "{} \t\r\n"),
		"-key-prefix %q must be non-empty, without braces or spaces", c.KeyPrefix)
	check(c.AdminKey != "" && len(c.AdminKey) < 16, "-admin-key must be at least 16 characters")
	errs = append(errs, c.RateLimit.validate()...)
	errs = append(errs, c.Auth.validate()...)
	if c.RedisURL == "" && !c.Dev && !isLoopback(c.Addr) {
		errs = append(errs, fmt.Errorf("-addr %s is not a loopback address: the embedded store is for trying Latchkey out; "+
			"set -redis-url (LATCHKEY_REDIS_URL) or pass -dev", c.Addr))
	}
	return errors.Join(errs...)
}

// isLoopback reports whether addr listens only on a loopback interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// WatchFlags tune watch streams (GET /v1/{locks,rwlocks,semaphores,elections}/{name}/events).
type WatchFlags struct {
	Ping         time.Duration // comment lines on an idle stream
	Resync       time.Duration // a watched name's state read again without a message
	MaxStreams   int           // streams this instance serves at once
	MaxPerClient int           // streams one API key or client address has open
}
