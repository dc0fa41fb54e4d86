package testenv

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// removePods stops and removes every pod sandbox through the CRI, so that
// containerd runs the CNI teardown (veth, IP release) and unmounts each
// sandbox's network namespace and rootfs.
func removePods(ctx context.Context, socket string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	var firstErr error
	for _, sb := range resp.Items {
		if err := removePod(ctx, rt, sb.Id); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// removePod stops and removes one pod sandbox, asking up to three times: a
// shim that died mid-way ("ttrpc: closed") fails the first stop, and
// containerd cleans up after the dead shim before the next.
func removePod(ctx context.Context, rt runtimeapi.RuntimeServiceClient, id string) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Second):
			}
		}
		if _, err = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			err = fmt.Errorf("stop pod sandbox %s: %w", id, err)
			continue
		}
		if _, err = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			err = fmt.Errorf("remove pod sandbox %s: %w", id, err)
			continue
		}
		return nil
	}
	return err
}

// criReady reports whether containerd answers on the CRI with a ready runtime.
func criReady(ctx context.Context, socket string) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	st, err := runtimeapi.NewRuntimeServiceClient(conn).Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type == runtimeapi.RuntimeReady && !c.Status {
			return fmt.Errorf("runtime not ready: %s", c.Message)
		}
	}
	return nil
}
