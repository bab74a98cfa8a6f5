"""nsverify/workloads"""
