//go:build !linux

package main

import "syscall"

// sysProcAttr puts a process in a group of its own, so that a Ctrl-C
// reaches devstack, which stops the stack in order.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
