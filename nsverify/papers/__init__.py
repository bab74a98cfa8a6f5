"""nsverify/papers"""
