// Package redisconn turns a REDIS_URL into connection options that both
// asynq and the lock/cache client use, so that every part of the service
// reaches the same Redis: standalone, behind Sentinel, or a Redis Cluster.
package redisconn

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// DefaultURL is REDIS_URL's default in every binary: a Redis on this
// machine's standard port, database 0.
const DefaultURL = "redis://localhost:6379/0"

// Parse understands these forms:
//
//	redis://[user:password@]host:port[/db]
//	rediss://[user:password@]host:port[/db]                (TLS)
//	redis-sentinel://[user:password@]host:port[,host:port...][/db]?master=name[&sentinel_password=...]
//	redis-cluster://[user:password@]host:port[,host:port...]
//	rediss-cluster://[user:password@]host:port[,host:port...]   (TLS)
//
// In the Sentinel form the user and password are those of the Redis
// servers; the Sentinels' own password, if any, is sentinel_password.
// In the cluster forms the addresses are a seed list: any reachable node
// tells the client about the others. A cluster has only database 0.
func Parse(raw string) (asynq.RedisConnOpt, error) {
	// net/url refuses a host list such as "h1:26379,h2:26379"; lift the
	// hosts out before parsing the rest.
	raw, hosts := liftHosts(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	if hosts != "" {
		u.Host = hosts
	}
	db, err := parseDB(u.Path)
	if err != nil {
		return nil, err
	}
	username := u.User.Username()
	password, _ := u.User.Password()

	switch u.Scheme {
	case "redis", "rediss":
		if u.Host == "" {
			return nil, fmt.Errorf("redis url: missing host")
		}
		opt := asynq.RedisClientOpt{Addr: withDefaultPort(u.Host, "6379"), Username: username, Password: password, DB: db}
		if u.Scheme == "rediss" {
			opt.TLSConfig = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
		}
		return opt, nil
	case "redis-sentinel":
		q := u.Query()
		master := q.Get("master")
		if master == "" {
			return nil, fmt.Errorf("redis url: a redis-sentinel url needs ?master=<name>")
		}
		var addrs []string
		for _, a := range strings.Split(u.Host, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, withDefaultPort(a, "26379"))
			}
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("redis url: a redis-sentinel url needs at least one sentinel address")
		}
		return asynq.RedisFailoverClientOpt{
			MasterName:       master,
			SentinelAddrs:    addrs,
			SentinelPassword: q.Get("sentinel_password"),
			Username:         username,
			Password:         password,
			DB:               db,
		}, nil
	case "redis-cluster", "rediss-cluster":
		return parseCluster(u, db, username, password)
	default:
		return nil, fmt.Errorf("redis url: unsupported scheme %q (want redis, rediss, redis-sentinel, redis-cluster or rediss-cluster)", u.Scheme)
	}
}

// parseCluster checks a cluster URL's seed addresses, each host:port
// with an explicit port (cluster nodes rarely all listen on 6379, and a
// typo should not silently pick it).
func parseCluster(u *url.URL, db int, username, password string) (asynq.RedisConnOpt, error) {
	if db != 0 {
		return nil, fmt.Errorf("redis url: a Redis Cluster has only database 0, not %d", db)
	}
	if u.RawQuery != "" {
		return nil, fmt.Errorf("redis url: a %s url takes no query parameters (got %q)", u.Scheme, u.RawQuery)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("redis url: a %s url needs at least one host:port", u.Scheme)
	}
	var addrs []string
	for _, a := range strings.Split(u.Host, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("redis url: empty address in the cluster's list %q", u.Host)
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			return nil, fmt.Errorf("redis url: cluster address %q is not host:port", a)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("redis url: cluster address %q has no valid port", a)
		}
		addrs = append(addrs, a)
	}
	opt := asynq.RedisClusterClientOpt{Addrs: addrs, Username: username, Password: password}
	if u.Scheme == "rediss-cluster" {
		// No ServerName: each node's certificate is checked against the
		// address the client dials, which is the one the cluster announces
		// for that node, not the seed's.
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return opt, nil
}

// NewClient opens a go-redis client with the same options asynq uses: a
// *redis.ClusterClient for the cluster forms, which routes each command
// to the node owning its key's hash slot.
func NewClient(opt asynq.RedisConnOpt) redis.UniversalClient {
	return opt.MakeRedisClient().(redis.UniversalClient)
}

// liftHosts replaces the host part of a URL with a placeholder and returns
// it, so that a comma-separated list of host:port survives url.Parse.
func liftHosts(raw string) (rest, hosts string) {
	scheme, after, ok := strings.Cut(raw, "://")
	if !ok {
		return raw, ""
	}
	end := strings.IndexAny(after, "/?#")
	if end < 0 {
		end = len(after)
	}
	authority := after[:end]
	userinfo := ""
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, authority = authority[:at+1], authority[at+1:]
	}
	if !strings.Contains(authority, ",") {
		return raw, ""
	}
	return scheme + "://" + userinfo + "placeholder" + after[end:], authority
}

func parseDB(path string) (int, error) {
	p := strings.Trim(path, "/")
	if p == "" {
		return 0, nil
	}
	db, err := strconv.Atoi(p)
	if err != nil || db < 0 {
		return 0, fmt.Errorf("redis url: database %q is not a non-negative number", p)
	}
	return db, nil
}

func withDefaultPort(h, port string) string {
	if _, _, err := net.SplitHostPort(h); err == nil {
		return h
	}
	return net.JoinHostPort(strings.Trim(h, "[]"), port)
}
