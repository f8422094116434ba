package weights

import (
	"context"
	"net/url"
)

// Load asks the service to load a set and waits until it is loaded.
func (c *Client) Load(ctx context.Context, req LoadRequest) (Status, error) {
	var st Status
	err := c.Do(ctx, "/v1/load", req, &st)
	return st, err
}

// List returns the known sets.
func (c *Client) List(ctx context.Context) ([]Status, error) {
	var out []Status
	err := c.Do(ctx, "/v1/sets", nil, &out)
	return out, err
}

// Status returns one set.
func (c *Client) Status(ctx context.Context, name string) (Status, error) {
	var st Status
	err := c.Do(ctx, "/v1/sets/"+url.PathEscape(name), nil, &st)
	return st, err
}

// Evict drops a set's contents.
func (c *Client) Evict(ctx context.Context, name string, force bool) (Status, error) {
	var st Status
	err := c.Do(ctx, "/v1/evict", nameRequest{Name: name, Force: force}, &st)
	return st, err
}

// Forget drops a set from the host.
func (c *Client) Forget(ctx context.Context, name string, force bool) error {
	var out struct{}
	return c.Do(ctx, "/v1/forget", nameRequest{Name: name, Force: force}, &out)
}

// Ensure makes sure a container may map a set and that it is loaded.
// With CheckOnly it only checks, and answers the set's state.
func (c *Client) Ensure(ctx context.Context, req EnsureRequest) (EnsureResult, error) {
	var res EnsureResult
	err := c.Do(ctx, "/v1/ensure", req, &res)
	return res, err
}
