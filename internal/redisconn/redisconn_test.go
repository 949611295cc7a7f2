package redisconn

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want asynq.RedisConnOpt
	}{
		{"redis://localhost:6379/0", asynq.RedisClientOpt{Addr: "localhost:6379"}},
		{"redis://cache", asynq.RedisClientOpt{Addr: "cache:6379"}},
		{"redis://app:s3cret@cache:6380/4", asynq.RedisClientOpt{Addr: "cache:6380", Username: "app", Password: "s3cret", DB: 4}},
		{"redis-sentinel://:pw@10.0.0.1:26379,10.0.0.2,[::1]:5000/2?master=mymaster&sentinel_password=spw",
			asynq.RedisFailoverClientOpt{
				MasterName:       "mymaster",
				SentinelAddrs:    []string{"10.0.0.1:26379", "10.0.0.2:26379", "[::1]:5000"},
				SentinelPassword: "spw",
				Password:         "pw",
				DB:               2,
			}},
		{"redis-sentinel://s1:26379?master=m", asynq.RedisFailoverClientOpt{MasterName: "m", SentinelAddrs: []string{"s1:26379"}}},
		{"redis-cluster://app:s3cret@10.0.0.1:7000,10.0.0.2:7001, [::1]:7002",
			asynq.RedisClusterClientOpt{Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7001", "[::1]:7002"}, Username: "app", Password: "s3cret"}},
		{"redis-cluster://:pw@node-a:7000/0", asynq.RedisClusterClientOpt{Addrs: []string{"node-a:7000"}, Password: "pw"}},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Parse(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}

	tls, err := Parse("rediss://cache.example.com:6380")
	if err != nil {
		t.Fatal(err)
	}
	if c := tls.(asynq.RedisClientOpt).TLSConfig; c == nil || c.ServerName != "cache.example.com" {
		t.Errorf("rediss:// TLS config = %+v, want ServerName cache.example.com", c)
	}

	for _, bad := range []string{
		"http://localhost:6379",
		"localhost:6379",
		"redis://localhost:6379/zero",
		"redis:///0",
		"redis-sentinel://s1:26379,s2:26379",
		"redis-sentinel://?master=m",
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = nil error, want a refusal", bad)
		}
	}
}

func TestParseClusterTLS(t *testing.T) {
	t.Parallel()
	opt, err := Parse("rediss-cluster://:pw@node-a.example.com:7000,node-b.example.com:7000")
	if err != nil {
		t.Fatal(err)
	}
	c := opt.(asynq.RedisClusterClientOpt)
	if c.TLSConfig == nil {
		t.Fatal("rediss-cluster:// has no TLS config")
	}
	// Each node is checked against its own name, which the client takes
	// from the address it dials; one ServerName would fit one node only.
	if c.TLSConfig.ServerName != "" {
		t.Errorf("rediss-cluster:// TLS ServerName = %q, want empty (the dialed host)", c.TLSConfig.ServerName)
	}
	plain, err := Parse("redis-cluster://node-a:7000")
	if err != nil {
		t.Fatal(err)
	}
	if plain.(asynq.RedisClusterClientOpt).TLSConfig != nil {
		t.Error("redis-cluster:// would use TLS")
	}
}

// A bad cluster URL is refused with a reason an operator can act on.
func TestParseClusterRefusals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"redis-cluster://", "needs at least one host:port"},
		{"redis-cluster:///0", "needs at least one host:port"},
		{"redis-cluster://h1:7000/2", "only database 0, not 2"},
		{"redis-cluster://h1:7000/x", `database "x" is not a non-negative number`},
		{"redis-cluster://h1:7000,h2", `cluster address "h2" is not host:port`},
		{"redis-cluster://h1:7000,,h2:7001", "empty address"},
		{"redis-cluster://h1:7000,h2:0", `cluster address "h2:0" has no valid port`},
		{"redis-cluster://h1:7000,h2:70000", `cluster address "h2:70000" has no valid port`},
		{"redis-cluster://h1:7000,:7001", `cluster address ":7001" is not host:port`},
		{"redis-cluster://h1:7000?master=m", "takes no query parameters"},
		{"rediss-cluster://h1:7000,h2:7000/1", "only database 0"},
		{"redis+cluster://h1:7000", "unsupported scheme"},
	} {
		_, err := Parse(tt.in)
		if err == nil {
			t.Errorf("Parse(%q) = nil error, want one saying %q", tt.in, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %q, want it to say %q", tt.in, err, tt.want)
		}
	}
}

// The lock and cache client of a cluster URL is a cluster client, which
// follows the cluster's slots; a plain client would meet MOVED.
func TestNewClientForCluster(t *testing.T) {
	t.Parallel()
	opt, err := Parse("redis-cluster://127.0.0.1:7000,127.0.0.1:7001")
	if err != nil {
		t.Fatal(err)
	}
	rdb := NewClient(opt)
	defer rdb.Close()
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Errorf("NewClient(cluster) = %T, want *redis.ClusterClient", rdb)
	}
}
