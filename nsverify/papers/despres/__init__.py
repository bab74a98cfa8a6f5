"""nsverify/papers/despres"""
