package main

import "syscall"

// sysProcAttr puts a process in a group of its own (a Ctrl-C reaches
// devstack, which stops the stack in order) and kills it if devstack
// dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
